"""The RL trainer's engines: the DeepSpeed engine, full weights for generation under ZeRO-3, and the rollout
backend with its weight sync (``hf`` samples from the live policy; ``vllm`` keeps its own copy)."""

from __future__ import annotations

from contextlib import nullcontext


def training_dtype(cfg, dist) -> str:
    """The policy's compute dtype: bf16 under DeepSpeed with ``optim.dtype`` bf16 (or auto on a GPU), else
    fp32 (the torch path trains the fp32 weights it loads). The reference model is loaded in it too: a
    bf16 policy beside an fp32 reference doubles the reference's memory for no precision the policy has."""
    wants_bf16 = cfg.optim.dtype == "bf16" or (cfg.optim.dtype == "auto" and dist.device.startswith("cuda"))
    return "bf16" if cfg.optim.deepspeed and wants_bf16 else "fp32"


def deepspeed_engine_for(cfg, model, optimizer, dist):
    if not cfg.optim.deepspeed:
        return None
    from ares_cli.training import distributed

    local_rows = cfg.optim.mini_batch_size // dist.world_size * cfg.rollout.group_size
    accum = -(-local_rows // cfg.optim.micro_batch_size)
    bf16 = training_dtype(cfg, dist) == "bf16"
    ds_config = distributed.deepspeed_config(cfg.optim.deepspeed, micro_batch=cfg.optim.micro_batch_size,
                                             grad_accum=accum, world_size=dist.world_size,
                                             grad_clip=cfg.optim.grad_clip, bf16=bf16)  # fmt: skip
    return distributed.deepspeed_engine(model, optimizer, ds_config)


def gathered_for_generation(model, engine):
    """Full parameters for generation under ZeRO-3 (a no-op context otherwise)."""
    from ares_cli.training import distributed

    if distributed.zero_stage(engine) != 3:
        return nullcontext()
    import deepspeed

    class _Gather:
        def __enter__(self):
            self.ctx = deepspeed.zero.GatheredParameters(list(model.parameters()))
            return self.ctx.__enter__()

        def __exit__(self, *exc):
            return self.ctx.__exit__(*exc)

    return _Gather()


def rollout_backend(cfg, model, tokenizer, model_path, processor=None, problems=()):
    """hf: the live policy itself (no copy); vllm: its own engine, weights synced after every step."""
    from ares_cli.generation import resolve_backend_name

    if resolve_backend_name(cfg.rollout.backend) == "vllm":
        from ares_cli.generation.vllm_backend import VLLMBackend
        from ares_cli.stages.sampling import most_images

        images = most_images(list(problems))
        pixels = (
            {"min_pixels": cfg.rollout.min_pixels, "max_pixels": cfg.rollout.max_pixels} if images else {}
        )
        return VLLMBackend(
            model_path,
            seed=cfg.seed,
            gpu_memory_utilization=cfg.rollout.vllm_gpu_memory_utilization,
            max_model_len=cfg.rollout.max_prompt_tokens + cfg.rollout.max_new_tokens,
            max_images=images or None,
            **pixels,
        )
    from ares_cli.generation.hf import HFBackend

    return HFBackend.from_model(model, tokenizer, batch_size=cfg.rollout.batch_size, processor=processor)


def sync_backend(backend, model, gather) -> None:
    if getattr(backend, "model", None) is model:
        return  # the hf backend samples from the live policy
    with gather:
        backend.sync_weights(model)
