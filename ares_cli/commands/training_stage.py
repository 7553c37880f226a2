"""The artifact life cycle shared by the training verbs (``sft``, ``rl``) under one or many ranks.

Rank 0 opens (or finds up to date) the stage's artifact and broadcasts its directories; every rank trains in
the work directory; rank 0 finalises and reports. A run that stops early, fails or is killed leaves its
``.partial`` directory unlocked as the resume point.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ares_cli.console import GlobalOptions, emit
from ares_cli.errors import StageFailure, UsageError


def _check_resumable(store, stage: str, **key: Any) -> None:
    """``--resume``: a UsageError unless a partial run of this key holds a checkpoint (checked before
    anything is created, so the message never names a directory the run itself just made)."""
    final_dir, work_dir = store.stage_dirs(stage, **key)
    if (final_dir / "manifest.json").is_file():
        return  # complete: the run answers "up to date"
    if not work_dir.is_dir():
        raise UsageError(
            f"--resume: there is no partial run of this configuration to resume (no {work_dir.name} under "
            f"{work_dir.parent}); run without --resume to start one"
        )
    if not (work_dir / "checkpoints").is_dir():
        raise UsageError(f"--resume: {work_dir} holds no checkpoint to resume from")


def run_training_stage(
    opts: GlobalOptions,
    store,
    stage: str,
    *,
    code_version: str,
    config: dict[str, Any],
    inputs: list[dict[str, Any]],
    seed: int,
    force: bool,
    train: Callable[[Path], Any],
    require_checkpoint: bool = False,
) -> None:
    """Open, train (``train(work_dir)`` returns an outcome with ``complete`` and ``stats``), finalise, emit.

    ``require_checkpoint`` (``--resume``) fails with a usage error unless the work directory holds a
    checkpoint to continue from.
    """
    from ares_cli.training import distributed

    if require_checkpoint:
        _check_resumable(store, stage, code_version=code_version, config=config, inputs=inputs)
    dist = distributed.init_from_env()
    run, info = distributed.open_stage_on_main(
        store, dist, stage, code_version=code_version, config=config, inputs=inputs, seeds={"seed": seed},
        force=force,
    )  # fmt: skip
    work_dir = Path(info["work_dir"])
    result = {
        "path": info["final"],
        "artifact_id": Path(info["final"]).name,
        "up_to_date": info["up_to_date"],
    }
    if info["up_to_date"]:
        if dist.is_main:
            opts.log(f"{stage}: up to date ({result['artifact_id']})")
            emit(opts, result)
        return
    try:
        if info["resumed"] and dist.is_main:
            opts.log(f"{stage}: resuming partial artifact {work_dir}")
        outcome = train(work_dir)
        if not outcome.complete:
            raise StageFailure(
                f"{stage} stopped after step {outcome.stats.get('steps')}; rerun the same command to resume"
            )
        if dist.is_main:
            final = run.finalize(outcome.stats)
            acc = outcome.stats.get("val_accuracy_final")
            tail = f" | val accuracy {acc:.4f}" if acc is not None else ""
            opts.log(f"{stage}: done {result['artifact_id']}{tail}")
            emit(opts, {**result, "path": str(final), "stats": outcome.stats})
    except BaseException:
        from ares_cli.stages.partial import discard_if_empty

        if run is not None:
            discard_if_empty(run)  # refused before writing anything (e.g. invalid data): no empty .partial
        raise
    finally:
        if run is not None:
            run.release()  # a failed or killed run leaves its partial dir (the resume point) unlocked
    distributed.barrier()
    distributed.shutdown()
