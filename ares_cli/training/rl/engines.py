"""The RL trainer's engines: the DeepSpeed engine, full weights for generation under ZeRO-3, and the rollout
backend with its weight sync (``hf`` samples from the live policy; ``vllm`` keeps its own copy)."""

from __future__ import annotations

from contextlib import nullcontext


def training_dtype(optim, dist) -> str:
    """The policy's compute dtype: bf16 under DeepSpeed with ``optim.dtype`` bf16 (or auto on a GPU), else
    fp32 (the torch path trains the fp32 weights it loads); ``optim`` is the config's section. The reference
    model is loaded in it too: a bf16 policy beside an fp32 reference doubles the reference's memory for no
    precision the policy has."""
    wants_bf16 = optim.dtype == "bf16" or (optim.dtype == "auto" and dist.device.startswith("cuda"))
    return "bf16" if optim.deepspeed and wants_bf16 else "fp32"


def deepspeed_config_for(cfg, dist) -> dict | None:
    """The filled DeepSpeed config of the policy (None without ``optim.deepspeed``)."""
    if not cfg.optim.deepspeed:
        return None
    from ares_cli.training import distributed
    from ares_cli.training.offload import with_client_optimizer

    local_rows = cfg.optim.mini_batch_size // dist.world_size * cfg.rollout.group_size
    accum = -(-local_rows // cfg.optim.micro_batch_size)
    bf16 = training_dtype(cfg.optim, dist) == "bf16"
    filled = distributed.deepspeed_config(cfg.optim.deepspeed, micro_batch=cfg.optim.micro_batch_size,
                                          grad_accum=accum, world_size=dist.world_size,
                                          grad_clip=cfg.optim.grad_clip, bf16=bf16)  # fmt: skip
    return with_client_optimizer(filled, cfg.optim.deepspeed)


def deepspeed_engine_for(cfg, model, optimizer, dist):
    from ares_cli.training import distributed

    ds_config = deepspeed_config_for(cfg, dist)
    return distributed.deepspeed_engine(model, optimizer, ds_config) if ds_config is not None else None


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


def rollout_backend(cfg, model, tokenizer, model_path, processor=None, problems=(), device="cpu"):
    """hf: the live policy itself (no copy); vllm: its own engine, weights synced after every step."""
    from ares_cli.generation import resolve_backend_name

    if resolve_backend_name(cfg.rollout.backend) == "vllm":
        from ares_cli.data.records import most_images
        from ares_cli.generation.vllm_backend import VLLMBackend

        images = most_images(list(problems))
        pixels = (
            {"min_pixels": cfg.rollout.min_pixels, "max_pixels": cfg.rollout.max_pixels} if images else {}
        )
        return VLLMBackend(
            model_path,
            seed=cfg.seed,
            tensor_parallel_size=cfg.rollout.tensor_parallel_size,
            gpu_memory_utilization=cfg.rollout.vllm_gpu_memory_utilization,
            max_model_len=cfg.rollout.max_prompt_tokens + cfg.rollout.max_new_tokens,
            max_images=images or None,
            per_sample_seeds=cfg.rollout.per_sample_seeds,
            sleep_mode=sleep_mode_on(cfg.rollout, device),
            **pixels,
        )
    from ares_cli.generation.hf import HFBackend

    return HFBackend.from_model(model, tokenizer, batch_size=cfg.rollout.batch_size, processor=processor)


def sleep_mode_on(rollout, device: str) -> bool:
    """``rollout.sleep_mode`` (``rollout``: the config's section): on, off, or (auto) on where the engine
    holds GPU memory."""
    mode = rollout.sleep_mode
    return mode == "on" or (mode == "auto" and str(device).startswith("cuda"))


def rollout_groups(rollout, dist) -> tuple[int, int]:
    """(this rank's rollout share, the number of shares): the ranks of one tensor-parallel vLLM engine
    generate the same prompts together, so there are ``world / tensor_parallel_size`` shares (``rollout``:
    the config's section)."""
    from ares_cli.generation import resolve_backend_name

    tp = rollout.tensor_parallel_size if resolve_backend_name(rollout.backend) == "vllm" else 1
    return dist.rank // tp, dist.world_size // tp


def free_cached_memory(torch=None) -> None:
    """Hand the CUDA caching allocator's unused blocks back between phases (the engine's wake-up and the
    next phase's peak then find them); nothing where CUDA was never used."""
    if torch is None:
        import torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def after_rollout(backend) -> None:
    """The engine sleeps through the passes and the update (where it has a sleep mode), and the memory
    generation cached goes back to the allocator."""
    sleep = getattr(backend, "sleep", None)
    if sleep is not None:
        sleep()
    free_cached_memory()


def sync_backend(backend, model, gather) -> None:
    """Push the updated policy into a vLLM engine (woken around the load); the hf backend samples from the
    live policy and needs nothing."""
    if getattr(backend, "model", None) is model:
        return
    free_cached_memory()  # the update's activations, before the engine's weights come back
    with gather:
        backend.sync_weights(model)
