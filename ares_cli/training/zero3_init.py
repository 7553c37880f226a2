"""Models built already partitioned under ZeRO-3, as TRL, verl and OpenRLHF build them.

Without this every rank materialises the whole model and DeepSpeed partitions it at ``initialize``: a
transient of the whole policy (and reference) per GPU. Inside :func:`partitioned_loading`, transformers'
ZeRO-3 path is on (``transformers.integrations.set_hf_deepspeed_config``, the hook its
``HfDeepSpeedConfig`` sets, held for the block only): ``from_pretrained`` builds every module under
``deepspeed.zero.Init``, so each parameter is cut to this rank's 1/N partition as soon as its module
exists, and only rank 0 reads the checkpoint's values, scattered one module at a time. Stage 0, 1 and 2
configs (and no DeepSpeed) load as before: whole on every rank.

A partitioned parameter's ``data`` is an empty 1-D tensor; :func:`param_shape` and :func:`param_numel` give
its real shape and size, and :func:`load_partitioned_state` puts a checkpoint's weights into it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def is_zero3(config: dict[str, Any] | None) -> bool:
    """Whether a filled DeepSpeed config partitions the parameters (ZeRO stage 3)."""
    if not config:
        return False
    return int((config.get("zero_optimization") or {}).get("stage", 0)) == 3


class _ZeroThreeSettings:
    """What transformers reads through its weak reference: ``is_zero3()`` and the config for ``zero.Init``
    (``HfDeepSpeedConfig`` without its accelerate dependency)."""

    def __init__(self, config: dict[str, Any]):
        self.config = config

    def is_zero3(self) -> bool:
        return True


@contextmanager
def partitioned_loading(config: dict[str, Any] | None) -> Iterator[bool]:
    """Within the block, ``from_pretrained`` builds the model partitioned by ZeRO-3 ``config`` (yields True);
    a no-op yielding False when ``config`` is None or not stage 3. Every rank must enter it together (the
    load is collective)."""
    if not is_zero3(config):
        yield False
        return
    from ares_cli.training.distributed import deepspeed_ready, is_initialized

    with deepspeed_ready():
        from deepspeed import comm
        from deepspeed.accelerator import get_accelerator
        from transformers.integrations import set_hf_deepspeed_config, unset_hf_deepspeed_config

        # DeepSpeed's own comm over the process group, as deepspeed.initialize forms it: zero.Init reads the
        # world size from it (a group of one otherwise, and the batch keys then contradict the ranks)
        comm.init_distributed(dist_backend=get_accelerator().communication_backend_name(),
                              dist_init_required=not is_initialized())  # fmt: skip

        settings = _ZeroThreeSettings(config)  # alive for the block: transformers holds a weak reference
        set_hf_deepspeed_config(settings)
        try:
            yield True
        finally:
            unset_hf_deepspeed_config()  # later loads (and generate's synced_gpus) see no ZeRO-3


def is_partitioned(model) -> bool:
    """Whether ``model``'s parameters are ZeRO-3 partitions (built under ``zero.Init`` or by an engine)."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def param_shape(param) -> tuple[int, ...]:
    """The parameter's real shape, whole or partitioned."""
    return tuple(getattr(param, "ds_shape", param.shape))


def param_numel(param) -> int:
    """The parameter's real number of elements, whole or partitioned."""
    return int(getattr(param, "ds_numel", param.numel()))


def load_partitioned_state(model, state: dict) -> None:
    """A full state dict (every rank holds it) into a partitioned model: each parameter gathered alone,
    rank 0's values written and scattered back to every rank's partition; buffers (never partitioned)
    copied on every rank. A parameter or buffer the state lacks is an error, as ``load_state_dict``'s."""
    import deepspeed
    import torch
    import torch.distributed as dist

    missing = sorted(set(model.state_dict()) - set(state))
    if missing:
        raise KeyError(f"checkpoint lacks {len(missing)} tensor(s) of the model, first {missing[0]!r}")
    rank = dist.get_rank() if dist.is_initialized() else 0
    with torch.no_grad():
        for name, param in model.named_parameters():  # tied weights once
            with deepspeed.zero.GatheredParameters([param], modifier_rank=0):
                if rank == 0:
                    param.data.copy_(state[name])
        for name, buffer in model.named_buffers():
            if buffer is not None and name in state:
                buffer.copy_(state[name])
