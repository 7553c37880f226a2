"""ZeRO-Offload with ares's own optimizer. ares always hands DeepSpeed a client torch AdamW; DeepSpeed refuses
a client optimizer under optimizer offload at ``initialize`` unless ``zero_force_ds_cpu_optimizer`` is false
(it would rather build its DeepSpeedCPUAdam). The filled config therefore sets it false where the file
offloads the optimizer and says nothing of it (the AdamW then steps the CPU partitions); a file that sets it
true while offloading is refused before any work, naming the file and the field (exit 3)."""

from __future__ import annotations

from typing import Any

FORCE_KEY = "zero_force_ds_cpu_optimizer"


def offloads_optimizer(config: dict[str, Any]) -> bool:
    """Whether ``zero_optimization.offload_optimizer`` moves the optimizer off the GPU (cpu or nvme)."""
    offload = (config.get("zero_optimization") or {}).get("offload_optimizer") or {}
    return isinstance(offload, dict) and str(offload.get("device", "none")).lower() in ("cpu", "nvme")


def with_client_optimizer(config: dict[str, Any], path) -> dict[str, Any]:
    """``config`` (filled from ``path``) made to accept ares's client optimizer under optimizer offload."""
    if not offloads_optimizer(config):
        return config
    if config.get(FORCE_KEY, False) is True:
        from ares_cli.store.values import At
        from ares_cli.training.deepspeed_file import OFFLOAD_RULE

        raise (
            At.in_file(path)
            .child(FORCE_KEY)
            .error(
                f"true with optimizer offload: {OFFLOAD_RULE}; remove the key (ares sets it false) or set it false"
            )
        )
    return {**config, FORCE_KEY: False}
