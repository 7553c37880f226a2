"""`vllm` backend: one vLLM `LLM` engine with prefix caching; vllm is imported only when constructed.

Seeding: every sample is its own vLLM request with `n=1` and `seed=<that sample's seed>`. With `n=K` and
one seed, vLLM V0 draws all K sequences from one shared generator (a sample depends on its siblings) and
V1 derives child seeds as `seed + index`, so neither reproduces a sample from its own `seed_for` value.
The K single-sample requests of a prompt still share its KV blocks through prefix caching.

Images: a request with images is sent as its rendered text with ``multi_modal_data={"image": [...]}``
(decoded PIL images, in placeholder order), so vLLM's own processor expands the placeholders; the engine
is built with ``limit_mm_per_prompt={"image": max_images}`` and the processor's pixel bounds, and the
vision special tokens are banned from sampled text (``bad_words``), as in the hf backend.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ares_cli.errors import StageFailure, UsageError
from ares_cli.generation.types import FINISH_REASONS, Completion, GenerationRequest, SamplingParams
from ares_cli.models.pixels import VISION_TOKENS


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise UsageError(
            "the vllm backend needs the optional 'vllm' package and a CUDA GPU; "
            "install with `pip install ares-cli[vllm]` or use --backend hf"
        ) from e
    return vllm


class VLLMBackend:
    """Sample with vLLM. `logprobs=True` asks for the sampled token's logprob (vLLM `logprobs=0`)."""

    name = "vllm"

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        seed: int = 0,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        dtype: str = "auto",
        max_model_len: int | None = None,
        logprobs: bool = True,
        max_images: int | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        **llm_kwargs: Any,
    ):
        if model is None:
            raise UsageError("the vllm backend needs a model path or id")
        self._vllm = _import_vllm()
        kwargs: dict[str, Any] = dict(
            model=str(model),
            seed=seed,
            enable_prefix_caching=True,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
        )
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if max_images:
            kwargs["limit_mm_per_prompt"] = {"image": int(max_images)}
            pixels = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v}
            if pixels:
                kwargs["mm_processor_kwargs"] = pixels
        kwargs.update(llm_kwargs)
        self.llm = self._vllm.LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        from ares_cli.generation.stops import turn_end_ids

        self.turn_end_ids = sorted(turn_end_ids(self.tokenizer))  # e.g. <|im_end|> where eos is <|endoftext|>
        self.logprobs = logprobs
        self.max_images = int(max_images or 0)

    def _params(self, sampling: SamplingParams, seed: int):
        return self._vllm.SamplingParams(
            n=1,
            seed=seed,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,  # vLLM's default is 16: always pass it
            stop=list(sampling.stop),
            logprobs=0 if self.logprobs else None,
            **({"bad_words": list(VISION_TOKENS)} if self.max_images else {}),
            **({"stop_token_ids": self.turn_end_ids} if self.turn_end_ids else {}),
        )

    def generate(self, requests: list[GenerationRequest], sampling: SamplingParams) -> list[list[Completion]]:
        """Per request, one completion per seed, in seed order."""
        from ares_cli.errors import InputError

        prompts, params = [], []
        for req in requests:
            if req.images:
                if len(req.images) > self.max_images:
                    raise InputError(
                        f"{req.key or 'a request'!r} has {len(req.images)} image(s); the engine was built for "
                        f"at most {self.max_images} per prompt (max_images)",
                        field="images",
                    )
                from ares_cli.data.images import open_image

                images = [open_image(p) for p in req.images]
                prompt: dict[str, Any] = {"prompt": req.prompt, "multi_modal_data": {"image": images}}
            else:  # the template carries BOS
                prompt = {
                    "prompt_token_ids": list(
                        self.tokenizer(req.prompt, add_special_tokens=False)["input_ids"]
                    )
                }
            for seed in req.seeds:
                prompts.append(prompt)
                params.append(self._params(sampling, seed))
        outputs = self.llm.generate(prompts, params, use_tqdm=False) if prompts else []
        if len(outputs) != len(prompts):
            raise StageFailure(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        flat = iter(outputs)
        return [[self._completion(next(flat)) for _ in req.seeds] for req in requests]

    def generate_from_ids(
        self, prompts: list[list[int]], seeds: list[int], sampling: SamplingParams
    ) -> list[Completion]:
        """One completion per (token-id prompt, seed) row (RL branching: a prompt plus a partial response);
        the engine's prefix caching reuses the KV blocks of prefixes it has already computed."""
        params = [self._params(sampling, seed) for seed in seeds]
        inputs = [{"prompt_token_ids": list(p)} for p in prompts]
        outputs = self.llm.generate(inputs, params, use_tqdm=False) if inputs else []
        if len(outputs) != len(inputs):
            raise StageFailure(f"vLLM returned {len(outputs)} outputs for {len(inputs)} prompts")
        return [self._completion(o) for o in outputs]

    def _completion(self, output: Any) -> Completion:
        comp = output.outputs[0]
        reason = comp.finish_reason
        if reason not in FINISH_REASONS:
            raise StageFailure(f"vLLM request finished with {reason!r} (expected 'stop' or 'length')")
        token_ids = list(comp.token_ids)
        logprobs = None
        if self.logprobs and comp.logprobs is not None:
            logprobs = [float(step[tok].logprob) for tok, step in zip(token_ids, comp.logprobs, strict=True)]
        return Completion(text=comp.text, token_ids=token_ids, finish_reason=reason, logprobs=logprobs)

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> None:
        """Push (name, tensor) pairs into the running engine, then drop the now-stale prefix cache.

        Uses `LLM.apply_model` (vLLM >= 0.9; under V1 multiprocessing it needs
        VLLM_ALLOW_INSECURE_SERIALIZATION=1 and ships the tensors to the worker), else the in-process
        V0 path `llm_engine.model_executor.driver_worker.model_runner.model`.
        """
        weights = list(weights)
        if hasattr(self.llm, "apply_model"):
            self.llm.apply_model(lambda model: model.load_weights(weights=weights))
        else:
            executor = self.llm.llm_engine.model_executor
            executor.driver_worker.model_runner.model.load_weights(weights=weights)
        reset = getattr(self.llm, "reset_prefix_cache", None)
        if reset is not None:
            reset()

    def sync_weights(self, model: Any) -> None:
        """Load all weights of a (trainer) transformers model into the engine."""
        self.load_weights((name, tensor.detach()) for name, tensor in model.state_dict().items())
