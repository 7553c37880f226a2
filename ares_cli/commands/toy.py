"""``ares toy init``: the embedded toy world's base model as an artifact."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Annotated

import typer

from ares_cli.artifacts import ArtifactStore
from ares_cli.console import emit, options

app = typer.Typer(
    help="The embedded toy world: chained arithmetic, a teacher, a tiny model.", no_args_is_help=True
)

CODE_VERSION = "1"


@app.command("init")
def init_command(
    ctx: typer.Context,
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild from scratch even when up to date.")
    ] = False,
    seed: Annotated[int | None, typer.Option(help="Build seed (default: the shipped base's seed).")] = None,
) -> None:
    """Build (or copy the prebuilt) toy base model into the artifact store."""
    from ares_cli.toy import build

    opts = options(ctx)
    config = build.build_config(**({} if seed is None else {"seed": seed}))
    store = ArtifactStore(opts.artifacts_root)
    run = store.open_stage(
        "toy-init",
        code_version=CODE_VERSION,
        config=config,
        inputs=[],
        seeds={"seed": config["seed"]},
        force=force,
    )
    if run.up_to_date:
        opts.log(f"toy-init: up to date ({run.artifact_id})")
        emit(opts, {"path": str(run.final_dir), "artifact_id": run.artifact_id, "up_to_date": True})
        return
    model_dir = run.work_dir / "model"
    if model_dir.exists():
        shutil.rmtree(model_dir)
    started = time.time()
    if not force and config == _shipped_config(build.base_dir()):
        shutil.copytree(build.base_dir(), model_dir)
        origin = "prebuilt"
    else:
        opts.log("toy-init: building the base model from scratch (minutes on a CPU)")
        build.build_base(model_dir, seed=config["seed"], on_step=_progress(opts, config["steps"]))
        origin = "built"
    path = run.finalize({"origin": origin, "seconds": round(time.time() - started, 2)})
    opts.log(f"toy-init: {origin} base at {path}")
    emit(opts, {"path": str(path), "artifact_id": run.artifact_id, "up_to_date": False, "origin": origin})


def _shipped_config(base: Path) -> dict | None:
    """The build config recorded with the prebuilt base (None when no base ships)."""
    info = base / "build_info.json"
    return json.loads(info.read_text())["build_config"] if info.is_file() else None


def _progress(opts, total: int):
    def on_step(step: int, loss: float) -> None:
        if step % 100 == 0 or step == total - 1:
            opts.log(f"  step {step}/{total}  loss {loss:.3f}")

    return on_step
