"""The frozen reference model, placed per ``kl.reference``: whole on every rank's device, on the CPU (moved
to the device for its pass only, as OpenRLHF's ``ref_reward_offload`` does), or sharded under ZeRO-3 in
its own DeepSpeed engine without an optimizer (OpenRLHF's and verl's sharded reference). ``auto`` shards it
where the policy is sharded (ZeRO-3), else keeps it whole on the device."""

from __future__ import annotations

from contextlib import contextmanager


def placement(kl, policy_zero_stage: int) -> str:
    """``kl.reference`` resolved (``kl``: the config's section): device, cpu or zero3
    (:func:`~ares_cli.training.placement.reference_placement`)."""
    from ares_cli.training.placement import reference_placement

    return reference_placement(kl.reference, policy_zero_stage)


def zero3_inference_config(policy_config: dict) -> dict:
    """A ZeRO-3 engine config for a frozen model: the policy's batch and precision keys, stage 3, no
    optimizer, no optimizer offload (parameter offload kept if the policy's file asks for it)."""
    zero = dict(policy_config.get("zero_optimization", {}))
    zero = {k: v for k, v in zero.items() if k not in ("offload_optimizer", "stage")}
    keep = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size", "bf16", "fp16",
            "steps_per_print", "wall_clock_breakdown")  # fmt: skip
    return {
        **{k: policy_config[k] for k in keep if k in policy_config},
        "zero_optimization": {**zero, "stage": 3},
    }


def load_reference(kl, model_path, dist, *, dtype: str, policy_zero_stage: int, policy_ds_config=None):
    """(the reference to forward, its placement per the ``kl`` section). Loaded in the training ``dtype``,
    frozen; under ``zero3`` partitioned from the start (:mod:`ares_cli.training.zero3_init`)."""
    from ares_cli.models import load_model
    from ares_cli.training import distributed
    from ares_cli.training.zero3_init import partitioned_loading

    where = placement(kl, policy_zero_stage)
    ds_config = zero3_inference_config(policy_ds_config or {}) if where == "zero3" else None
    with partitioned_loading(ds_config):  # zero3: each rank builds only its partition
        ref = load_model(model_path, dtype=dtype).eval().requires_grad_(False)
    if where == "zero3":
        engine = distributed.deepspeed_engine(ref, None, ds_config)
        engine.eval()
        return engine, where
    return (ref if where == "cpu" else ref.to(dist.device)), where


@contextmanager
def on_device(ref, where: str, device: str):
    """The reference on ``device`` for the length of its pass when it lives on the CPU; as it is otherwise."""
    if where != "cpu" or str(device) == "cpu":
        yield ref
        return
    from ares_cli.training.rl.engines import free_cached_memory

    ref.to(device)
    try:
        yield ref
    finally:
        ref.to("cpu")
        free_cached_memory()
