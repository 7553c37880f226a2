"""Checkpoints, resume and the metric rows of an RL run.

A checkpoint (``<work_dir>/checkpoints/step-NNNNNN/``, :mod:`ares_cli.training.checkpoint`: safetensors +
JSON, never pickle) holds the model, each rank's optimizer state and RNG states, and in ``state.json`` the
step, the data cursor (prompts drawn so far), running counters and every controller's ``state_dict``. The
learning-rate schedule is a pure function of the optimiser step, which is stored too.

``metrics.jsonl`` and the trackers (:class:`ares_cli.training.tracking.MetricLog`) are keyed by ``step``. On resume,
rows written after the checkpoint the run resumes from (the killed run got further than its last checkpoint)
are dropped first, so the resumed run rewrites those steps and no step is ever duplicated.

With ``val.select_by`` the best validated model is kept in ``<work_dir>/best-model`` (its step and score in
the counters) and becomes ``model`` at the end, the last step's moving to ``last-model``.
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


BEST, LAST = "best-model", "last-model"


def keep_best(out_dir: Path, step: int, score: float, counters: dict[str, Any], *, model, engine, tokenizer,
              dist) -> bool:  # fmt: skip
    """Checkpoint selection (``val.select_by``; PAEC: best AIME23 Pass@16 of the validated steps).

    When ``score`` beats ``counters["best_score"]`` (an earlier step wins a tie), the model is written to
    ``out_dir/best-model`` (``save_pretrained``; a collective under ZeRO-3) and the counters, which every
    checkpoint stores, remember the step and score, so a resumed run keeps its best. Returns whether it
    replaced the best."""
    from ares_cli.training import distributed

    if counters.get("best_step") is not None and score <= counters["best_score"]:
        return False
    weights = None
    if distributed.zero_stage(engine) == 3:
        weights = engine._zero3_consolidated_16bit_state_dict()  # collective: every rank calls it
    if dist.is_main:
        path = Path(out_dir) / BEST
        model.save_pretrained(str(path), state_dict=weights)
        tokenizer.save_pretrained(str(path))
    distributed.barrier()
    counters["best_step"], counters["best_score"] = step, float(score)
    return True


def promote_best(out_dir: Path, dist, *, keep_last: bool = False) -> None:
    """After the final save: ``model`` (the last step's) becomes ``last-model`` and ``best-model`` the
    ``model``; with ``keep_last`` (the last step was the best) the copy is simply dropped."""
    import os
    import shutil

    from ares_cli.training import distributed

    if dist.is_main:
        out = Path(out_dir)
        if keep_last:
            shutil.rmtree(out / BEST, ignore_errors=True)
        else:
            shutil.rmtree(out / LAST, ignore_errors=True)
            os.replace(out / "model", out / LAST)
            os.replace(out / BEST, out / "model")
    distributed.barrier()
