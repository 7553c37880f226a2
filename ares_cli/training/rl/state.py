"""Checkpoints, resume and the metric rows of an RL run.

A checkpoint (``<work_dir>/checkpoints/step-NNNNNN/``, :mod:`ares_cli.training.checkpoint`: safetensors +
JSON, never pickle) holds the model, each rank's optimizer state and RNG states, and in ``state.json`` the
step, the data cursor (prompts drawn so far), running counters and every controller's ``state_dict``. The
learning-rate schedule is a pure function of the optimiser step, which is stored too.

``metrics.jsonl`` and the trackers (:class:`ares_cli.tracking.MetricLog`) are keyed by ``step``. On resume,
rows written after the checkpoint the run resumes from (the killed run got further than its last checkpoint)
are dropped first, so the resumed run rewrites those steps and no step is ever duplicated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save(root: Path, step: int, *, model, engine, optimizer, dist, algo, meta: dict[str, Any]) -> Path:
    """A collective checkpoint after ``step`` (every rank calls it)."""
    from ares_cli.training import checkpoint, distributed

    meta = {**meta, "step": step, "world_size": dist.world_size,
            "controllers": {name: c.state_dict() for name, c in algo.controllers().items()}}  # fmt: skip
    state = checkpoint.model_state(model, engine, dist)
    opt_state = checkpoint.optimizer_state(engine, optimizer)
    return checkpoint.save(root, step, model_state=state, optimizer_state=opt_state, meta=meta,
                           rank=dist.rank, barrier=distributed.barrier)  # fmt: skip


def load(root: Path, dist, log=None):
    """(path, model state, this rank's optimizer state, meta) of the newest checkpoint that verifies, or None."""
    from ares_cli.errors import UsageError
    from ares_cli.training import checkpoint

    path = checkpoint.latest(root, log)
    if path is None:
        return None
    model_state, optimizer_state, meta = checkpoint.load(path, dist.rank)
    if meta["world_size"] != dist.world_size:
        raise UsageError(
            f"{path} was written by {meta['world_size']} rank(s); resume with as many "
            f"(the optimizer state and the data split are per rank)"
        )
    return path, model_state, optimizer_state, meta


def restore_controllers(algo, meta: dict[str, Any]) -> None:
    from ares_cli.errors import StageFailure

    saved = meta.get("controllers", {})
    for name, controller in algo.controllers().items():
        if name not in saved:
            raise StageFailure(f"checkpoint lacks the state of controller '{name}'")
        controller.load_state_dict(saved[name])
