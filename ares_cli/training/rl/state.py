"""Checkpoints, resume and the metric rows of an RL run.

A checkpoint (``<work_dir>/checkpoints/step-NNNNNN/``, :mod:`ares_cli.training.checkpoint`: safetensors +
JSON, never pickle) holds the model, each rank's optimizer state and RNG states, and in ``state.json`` the
step, the data cursor (prompts drawn so far), running counters and every controller's ``state_dict``. The
learning-rate schedule is a pure function of the optimiser step, which is stored too.

``metrics.jsonl`` is a RowLog keyed by ``step``. On resume, rows written after the checkpoint the run
resumes from (the killed run got further than its last checkpoint) are dropped first, so the resumed run
rewrites those steps and no step is ever duplicated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

METRICS = "metrics.jsonl"


def save(root: Path, step: int, *, model, engine, optimizer, dist, algo, meta: dict[str, Any]) -> Path:
    """A collective checkpoint after ``step`` (every rank calls it)."""
    from ares_cli.training import checkpoint, distributed

    meta = {**meta, "step": step, "world_size": dist.world_size,
            "controllers": {name: c.state_dict() for name, c in algo.controllers().items()}}  # fmt: skip
    state = checkpoint.model_state(model, engine, dist)
    opt_state = checkpoint.optimizer_state(engine, optimizer)
    return checkpoint.save(root, step, model_state=state, optimizer_state=opt_state, meta=meta,
                           rank=dist.rank, barrier=distributed.barrier)  # fmt: skip


def load(root: Path, dist):
    """(path, model state, this rank's optimizer state, meta) of the latest checkpoint, or None."""
    from ares_cli.errors import UsageError
    from ares_cli.training import checkpoint

    path = checkpoint.latest(root)
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


def trim_rows(path: Path, last_step: int) -> None:
    """Drop rows with ``step > last_step`` (and a torn last line) from a metrics JSONL, atomically."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break
        if row["step"] <= last_step:
            keep.append(line)
    tmp = path.with_suffix(".trim")
    tmp.write_text("".join(keep), encoding="utf-8")
    os.replace(tmp, path)


class MetricRows:
    """``metrics.jsonl`` on rank 0 (a RowLog keyed by step); a no-op on other ranks."""

    def __init__(self, out_dir: Path, *, resumed_step: int, is_main: bool):
        from ares_cli.artifacts import RowLog

        self.log = None
        if is_main:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            path = Path(out_dir) / METRICS
            trim_rows(path, resumed_step)
            self.log = RowLog(path, ("step",))

    def __contains__(self, step: int) -> bool:
        return self.log is not None and (step,) in self.log

    def write(self, row: dict[str, Any]) -> None:
        if self.log is not None and (row["step"],) not in self.log:
            self.log.write([row])

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
