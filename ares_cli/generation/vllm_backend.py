"""`vllm` backend: one vLLM `LLM` engine with prefix caching; vllm is imported only when constructed.

Placement: the engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``). Under a launcher
(``WORLD_SIZE`` > 1: torchrun or the deepspeed launcher) it is built with
``distributed_executor_backend="external_launcher"``, which reads ``RANK``/``LOCAL_RANK`` and puts each
rank's engine on its own GPU; ``tensor_parallel_size`` ranks share one engine.

Seeding: by default one request per prompt with ``n=K`` and the prompt's first seed (vLLM's batched
sampler path; a sample depends on its siblings' count). ``per_sample_seeds=True`` sends every sample as its
own ``n=1`` request with its own seed (sample-level reproducibility, on vLLM's slower per-request
generator path); the K requests still share the prompt's KV blocks through prefix caching.

Weight sync: ``load_weights`` pushes (name, tensor) pairs straight into the in-process engine's model
(``model.load_weights``), then resets the prefix cache and, for image engines, the multi-modal and encoder
caches; a vLLM without one of these calls is an error, never a silent skip.

Images: a request with images is sent as its rendered text with ``multi_modal_data={"image": [...]}``
(decoded PIL images, in placeholder order), so vLLM's own processor expands the placeholders; the engine
is built with ``limit_mm_per_prompt={"image": max_images}`` and the processor's pixel bounds, and the
vision special tokens are banned from sampled text (``bad_words``), as in the hf backend.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ares_cli.errors import StageFailure, UsageError
from ares_cli.generation.types import FINISH_REASONS, Completion, GenerationRequest, SamplingParams
from ares_cli.models.pixels import VISION_TOKENS


def launcher_world() -> tuple[int, int]:
    """(rank, world size) from a torchrun-compatible launcher's environment; (0, 1) without one."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _import_vllm():
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: its model is reachable
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
        per_sample_seeds: bool = False,
        sleep_mode: bool = False,
        **llm_kwargs: Any,
    ):
        if model is None:
            raise UsageError("the vllm backend needs a model path or id")
        self._vllm = _import_vllm()
        rank, world = launcher_world()
        tp = int(tensor_parallel_size)
        if world > 1 and world % tp:
            raise UsageError(f"tensor_parallel_size {tp} does not divide the launcher's {world} ranks")
        kwargs: dict[str, Any] = dict(
            model=str(model),
            seed=seed + rank // tp
            if world > 1
            else seed,  # the ranks of one tensor-parallel group sample alike
            enable_prefix_caching=True,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
        )
        if world > 1:
            kwargs["distributed_executor_backend"] = "external_launcher"
            if world > tp:
                kwargs["data_parallel_size"] = world // tp
        if sleep_mode:
            kwargs["enable_sleep_mode"] = True
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
        self.per_sample_seeds = bool(per_sample_seeds)
        self.sleep_mode = bool(sleep_mode)
        self.asleep: set[str] = set()  # what sleep released and no wake_up has restored yet

    def _params(self, sampling: SamplingParams, seed: int, n: int = 1):
        return self._vllm.SamplingParams(
            n=n,
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

        self.wake_up(["weights", "kv_cache"])  # a no-op on an awake engine
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
            if not req.seeds:
                continue
            if self.per_sample_seeds:
                for seed in req.seeds:
                    prompts.append(prompt)
                    params.append(self._params(sampling, seed))
            else:
                prompts.append(prompt)
                params.append(self._params(sampling, req.seeds[0], n=len(req.seeds)))
        outputs = self.llm.generate(prompts, params, use_tqdm=False) if prompts else []
        if len(outputs) != len(prompts):
            raise StageFailure(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
        flat = iter(outputs)
        if self.per_sample_seeds:
            return [[self._completion(next(flat)) for _ in req.seeds] for req in requests]
        result = []
        for req in requests:
            if not req.seeds:
                result.append([])
                continue
            out = next(flat)
            if len(out.outputs) != len(req.seeds):
                raise StageFailure(f"vLLM returned {len(out.outputs)} samples for n={len(req.seeds)}")
            result.append([self._completion(out, i) for i in range(len(req.seeds))])
        return result

    def generate_from_ids(
        self, prompts: list[list[int]], seeds: list[int], sampling: SamplingParams
    ) -> list[Completion]:
        """One completion per (token-id prompt, seed) row (RL branching: a prompt plus a partial response);
        the engine's prefix caching reuses the KV blocks of prefixes it has already computed."""
        self.wake_up(["weights", "kv_cache"])
        params = [self._params(sampling, seed) for seed in seeds]
        inputs = [{"prompt_token_ids": list(p)} for p in prompts]
        outputs = self.llm.generate(inputs, params, use_tqdm=False) if inputs else []
        if len(outputs) != len(inputs):
            raise StageFailure(f"vLLM returned {len(outputs)} outputs for {len(inputs)} prompts")
        return [self._completion(o) for o in outputs]

    def _completion(self, output: Any, index: int = 0) -> Completion:
        comp = output.outputs[index]
        reason = comp.finish_reason
        if reason not in FINISH_REASONS:
            raise StageFailure(f"vLLM request finished with {reason!r} (expected 'stop' or 'length')")
        token_ids = list(comp.token_ids)
        logprobs = None
        if self.logprobs and comp.logprobs is not None:
            logprobs = [float(step[tok].logprob) for tok, step in zip(token_ids, comp.logprobs, strict=True)]
        return Completion(text=comp.text, token_ids=token_ids, finish_reason=reason, logprobs=logprobs)

    def engine_model(self) -> Any:
        """The in-process engine's model (vLLM V1 with multiprocessing off, as this backend builds it)."""
        try:
            return self.llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
        except AttributeError as e:
            raise StageFailure(
                f"the vLLM engine's model is not reachable in this process ({e}); the weight sync needs "
                "vLLM V1 with VLLM_ENABLE_V1_MULTIPROCESSING=0 (a vllm release in the supported range)"
            ) from e

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> None:
        """Push (name, tensor) pairs one at a time into the engine's model (no copy of the whole set)."""
        model = self.engine_model()
        for name, tensor in weights:
            model.load_weights(weights=[(name, tensor)])

    def reset_caches(self) -> None:
        """Drop what the old weights computed: the prefix (KV) cache and, for image engines, the
        multi-modal processor and encoder caches. A missing call is an error, not a skip."""
        calls = [("LLM.reset_prefix_cache", getattr(self.llm, "reset_prefix_cache", None))]
        if self.max_images:
            calls.append(("LLM.reset_mm_cache", getattr(self.llm, "reset_mm_cache", None)))
            engine = self.llm.llm_engine
            calls.append(("LLMEngine.reset_encoder_cache", getattr(engine, "reset_encoder_cache", None)))
        for name, call in calls:
            if call is None:
                raise StageFailure(
                    f"the installed vLLM has no {name}; a weight sync would serve stale caches"
                )
            call()

    def sleep(self) -> None:
        """Free the engine's GPU memory after a rollout (level 1: weights offloaded to CPU memory, KV cache
        dropped; level 2 would also drop buffers a sync does not resend). A no-op without sleep mode."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags: list[str]) -> None:
        """Restore ``tags`` (``weights``, ``kv_cache``) where sleep released them."""
        wanted = [t for t in tags if t in self.asleep]
        if wanted:
            self.llm.wake_up(tags=wanted)
            self.asleep -= set(wanted)

    def sync_weights(self, model: Any) -> None:
        """Load a (trainer) transformers model's parameters into the engine, one at a time, then reset the
        caches. Tied parameters are sent once (``named_parameters`` yields each tensor once). A sleeping
        engine gets its weights back first, its KV cache only after the load (as TRL and verl do)."""
        self.wake_up(["weights"])
        self.load_weights(one_parameter_at_a_time(model))
        self.wake_up(["kv_cache"])
        self.reset_caches()


def one_parameter_at_a_time(model: Any) -> Iterable[tuple[str, Any]]:
    """(name, full tensor) per parameter; a ZeRO-3 partitioned parameter is gathered alone, for as long as
    the consumer holds it, so a sync's extra memory is the largest parameter, not the model."""
    for name, param in model.named_parameters():
        if hasattr(param, "ds_id"):  # a DeepSpeed ZeRO-3 partitioned parameter
            import deepspeed

            with deepspeed.zero.GatheredParameters([param]):
                yield name, param.detach()
        else:
            yield name, param.detach()
