"""`hf` backend: transformers model + tokenizer (+ processor for images), batched sampling with a KV cache."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError, UsageError
from ares_cli.generation.stops import stop_ids
from ares_cli.generation.types import BatchDone, Completion, GenerationRequest, SamplingParams


class HFBackend:
    """Sample with a transformers causal LM.

    Loads from a local directory (or a hub id already in the local cache) onto CUDA in bf16 when available,
    else CPU fp32; a vision-language model also loads its processor (images resized into
    [`min_pixels`, `max_pixels`]). Rows are (prompt, seed) pairs, sorted by prompt length and decoded
    `batch_size` at a time; each row's randomness comes from its own seeded generator (see
    `ares_cli.generation.decode`).
    """

    name = "hf"
    reports_batches = True  # generate() takes on_batch: callers may grade a batch while the next decodes

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        batch_size: int = 64,
        device: str | None = None,
        dtype: str | None = None,
        hf_model: Any = None,
        tokenizer: Any = None,
        processor: Any = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
    ):
        import torch

        from ares_cli.models.vision import suppressed_token_ids

        if batch_size < 1:
            raise UsageError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        if hf_model is None:
            if model is None:
                raise UsageError("the hf backend needs a model path or id")
            from ares_cli.models import load_model

            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            hf_model = load_model(model, dtype=dtype, device=device)
            if processor is None:
                from ares_cli.models import load_processor

                processor = load_processor(model, min_pixels=min_pixels, max_pixels=max_pixels)
        elif device is not None:
            hf_model = hf_model.to(device)
        if tokenizer is None:
            from ares_cli.models import load_tokenizer

            source = model if model is not None else getattr(hf_model, "name_or_path", None)
            if not source:
                raise UsageError("the hf backend needs a tokenizer or a model path to load one from")
            tokenizer = load_tokenizer(source)
        self.model = hf_model.eval()
        self.tokenizer = tokenizer
        self.processor = processor
        self.suppress_ids = suppressed_token_ids(self.model)
        self.eos_ids = stop_ids(self.model, tokenizer)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (min(self.eos_ids) if self.eos_ids else 0))

    @classmethod
    def from_model(
        cls, hf_model: Any, tokenizer: Any, *, batch_size: int = 64, processor: Any = None
    ) -> HFBackend:
        """Wrap an already loaded model (e.g. the trainer's policy) without copying it."""
        return cls(None, batch_size=batch_size, hf_model=hf_model, tokenizer=tokenizer, processor=processor)

    def encode(self, prompt: str) -> list[int]:
        """Token ids of a rendered prompt (the chat template already carries any BOS)."""
        return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]

    def encode_request(self, request: GenerationRequest):
        """(token ids, :class:`~ares_cli.models.vision.VisionInputs` or None) of a request."""
        from ares_cli.models.vision import encode_prompt

        if request.images and self.processor is None:
            raise InputError(
                f"{request.key or 'a request'!r} has {len(request.images)} image(s) but the model is text-only "
                "(no vision tower or processor)",
                field="images",
            )
        return encode_prompt(self.tokenizer, self.processor, request.prompt, request.images)

    def _stop_checker(self, stop: tuple[str, ...]):
        if not stop:
            return None
        window = max(len(s) for s in stop) + 4  # tokens: a token almost always decodes to >= 1 character

        def hit(ids: list[int]) -> bool:
            tail = self.tokenizer.decode(ids[-window:], skip_special_tokens=True)
            return any(s in tail for s in stop)

        return hit

    def _finish(self, ids: list[int], lps: list[float], reason: str, stop: tuple[str, ...]) -> Completion:
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if stop:
            cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
            if cut >= 0:
                text, reason = text[:cut], "stop"
        return Completion(text=text, token_ids=list(ids), finish_reason=reason, logprobs=list(lps))

    def generate(
        self, requests: list[GenerationRequest], sampling: SamplingParams, on_batch: BatchDone | None = None
    ) -> list[list[Completion]]:
        """Per request, one completion per seed, in seed order. ``on_batch``, when given, is called after
        each decode batch with its finished ``(request index, seed index, completion)`` rows (so that a
        caller can grade them while the next batch decodes)."""
        from ares_cli.generation.decode import decode_chunk

        pairs = [self.encode_request(r) for r in requests]
        encoded, vision = [ids for ids, _ in pairs], [v for _, v in pairs]
        for r, ids in zip(requests, encoded, strict=True):
            if not ids and r.seeds:
                raise UsageError(f"prompt for {r.key or 'a request'!r} encodes to no tokens")
        rows = [(ri, si) for ri, r in enumerate(requests) for si in range(len(r.seeds))]
        rows.sort(key=lambda rs: (len(encoded[rs[0]]), rs[0]))
        out: list[list[Completion | None]] = [[None] * len(r.seeds) for r in requests]
        stop_hit = self._stop_checker(sampling.stop)
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            results = decode_chunk(
                self.model,
                [encoded[ri] for ri, _ in chunk],
                [requests[ri].seeds[si] for ri, si in chunk],
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_new_tokens=sampling.max_new_tokens,
                eos_ids=self.eos_ids,
                pad_id=self.pad_id,
                stop_hit=stop_hit,
                vision=[vision[ri] for ri, _ in chunk],
                suppress_ids=self.suppress_ids,
            )
            for (ri, si), res in zip(chunk, results, strict=True):
                out[ri][si] = self._finish(res.token_ids, res.logprobs, res.finish_reason, sampling.stop)
            if on_batch is not None:
                on_batch([(ri, si, out[ri][si]) for ri, si in chunk])
        return out  # type: ignore[return-value]

    def generate_from_ids(
        self, prompts: list[list[int]], seeds: list[int], sampling: SamplingParams
    ) -> list[Completion]:
        """One completion per (token-id prompt, seed) row: continue already tokenised text, e.g. a prompt
        plus a partial response (RL branching). Rows sharing a prefix in a decode batch are prefilled once
        and their KV-cache rows copied (:func:`~ares_cli.generation.decode.decode_chunk`)."""
        from ares_cli.generation.decode import decode_chunk

        order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), prompts[i]))
        out: list[Completion | None] = [None] * len(prompts)
        stop_hit = self._stop_checker(sampling.stop)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            results = decode_chunk(self.model, [prompts[i] for i in chunk], [seeds[i] for i in chunk],
                                   temperature=sampling.temperature, top_p=sampling.top_p,
                                   max_new_tokens=sampling.max_new_tokens, eos_ids=self.eos_ids,
                                   pad_id=self.pad_id, stop_hit=stop_hit, suppress_ids=self.suppress_ids)  # fmt: skip
            for i, res in zip(chunk, results, strict=True):
                out[i] = self._finish(res.token_ids, res.logprobs, res.finish_reason, sampling.stop)
        return out  # type: ignore[return-value]

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> None:
        """Copy (name, tensor) pairs into the model in place; every name must exist."""
        import torch

        params = dict(self.model.state_dict())
        with torch.no_grad():
            for name, tensor in weights:
                if name not in params:
                    raise UsageError(f"weight {name!r} is not a parameter of the generation model")
                params[name].copy_(tensor)

    def sync_weights(self, model: Any) -> None:
        """Copy all weights of a (trainer) model with the same architecture into this backend's model."""
        if model is self.model:
            return
        self.load_weights(model.state_dict().items())
