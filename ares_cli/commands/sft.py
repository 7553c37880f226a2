"""`ares sft`: cold-start fine-tune a model on a curate artifact (or any chat JSONL) -> an `sft` artifact.

Resuming is automatic: a killed run leaves ``artifacts/sft/sft-<key>.partial/checkpoints/step-N`` and the
same command continues from it. Under ``torchrun``/``deepspeed`` every rank runs this command; rank 0 owns
the artifact (lock, manifest), the others learn its directory from rank 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ares_cli.commands.training_stage import deepspeed_config_ref, run_training_stage
from ares_cli.console import options
from ares_cli.errors import InputError

PANEL_IO, PANEL_TRAIN = "Inputs", "Training"


def resolve_data(store, ref: str):
    """(JSONL path, InputRef) for a JSONL file or a curate artifact id (its ``sft.jsonl``)."""
    ref_obj = store.input_ref("data", ref)
    if ref_obj.artifact_id is None:
        return Path(ref_obj.path), ref_obj
    path = Path(ref_obj.path) / "sft.jsonl"
    if not path.is_file():
        raise InputError(f"artifact {ref_obj.artifact_id} has no sft.jsonl")
    return path, ref_obj


def command(
    ctx: typer.Context,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help="Model dir, hub id, or toy-init/sft/rl artifact id.",
            rich_help_panel=PANEL_IO,
        ),
    ],
    data: Annotated[
        str,
        typer.Option(
            "--data",
            "-d",
            help="Curate artifact id, or a JSONL of prompt/response or messages.",
            rich_help_panel=PANEL_IO,
        ),
    ],
    config: Annotated[
        Path | None,
        typer.Option("--config", help="YAML with SFT keys (or an 'sft:' section).", rich_help_panel=PANEL_IO),
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override a config key: key=value (repeatable).", rich_help_panel=PANEL_TRAIN
        ),
    ] = None,
    epochs: Annotated[
        int | None, typer.Option("--epochs", help="Epochs (default 2).", rich_help_panel=PANEL_TRAIN)
    ] = None,
    lr: Annotated[
        float | None,
        typer.Option("--lr", help="Peak learning rate (default 2e-5).", rich_help_panel=PANEL_TRAIN),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size", help="Global batch in sequences (default 256).", rich_help_panel=PANEL_TRAIN
        ),
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            "--max-steps", help="Optimiser steps (default: all epochs).", rich_help_panel=PANEL_TRAIN
        ),
    ] = None,
    deepspeed: Annotated[
        Path | None,
        typer.Option(
            "--deepspeed",
            help="DeepSpeed config, e.g. pipelines/deepspeed/zero2.json.",
            rich_help_panel=PANEL_TRAIN,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Retrain from scratch, discarding a complete or partial "
            "artifact (resuming is otherwise automatic).",
        ),
    ] = False,
    report_to: Annotated[
        str,
        typer.Option(
            "--report-to",
            help="Metric trackers: jsonl (always), tensorboard, wandb; comma-separated.",
            rich_help_panel=PANEL_IO,
        ),
    ] = "jsonl",
) -> None:
    """Cold-start supervised fine-tuning: loss on assistant tokens only; resumes a killed run automatically."""
    from ares_cli.config import resolve, to_dict
    from ares_cli.stages.inputs import resolve_model
    from ares_cli.store.artifacts import ArtifactStore
    from ares_cli.training import sft, tracking

    opts = options(ctx)
    trackers = tracking.parse_report_to(report_to)
    cfg = resolve(
        sft.SFTConfig,
        yaml_path=config,
        sets=sets or [],
        section="sft",
        flags={
            "epochs": epochs,
            "lr": lr,
            "batch_size": batch_size,
            "max_steps": max_steps,
            "deepspeed": str(deepspeed) if deepspeed else None,
        },
    )
    store = ArtifactStore(opts.artifacts_root)
    deepspeed_refs = [deepspeed_config_ref(store, cfg.deepspeed)] if cfg.deepspeed else []
    model_dir, model_ref = resolve_model(store, model)
    from dataclasses import replace

    from ares_cli.stages.budget import model_context, resolve_seq_len

    seq_len, seq_len_source = resolve_seq_len(cfg.max_seq_len, model_context(model_dir))
    cfg = replace(cfg, max_seq_len=seq_len)
    data_path, data_ref = resolve_data(store, data)
    inputs = [model_ref, data_ref, *deepspeed_refs]
    from ares_cli.data.images import images_input_ref
    from ares_cli.data.jsonl import parse_jsonl
    from ares_cli.models import check_image_support

    image_ref = images_input_ref(data_path)
    if image_ref is not None:
        rows = parse_jsonl(data_path)[0]
        check_image_support([r for _, r in rows], [(str(data_path), n) for n, _ in rows], model_dir)
        inputs.append(image_ref)

    with opts.progress("sft", unit="steps") as progress:
        run_training_stage(
            opts,
            store,
            "sft",
            code_version=sft.CODE_VERSION,
            config=to_dict(cfg),
            inputs=inputs,
            seed=cfg.seed,
            force=force,
            train=lambda work_dir: _recording(
                sft.train_sft(
                    cfg,
                    model_path=model_dir,
                    data_path=data_path,
                    out_dir=work_dir,
                    log=opts.log,
                    report_to=trackers,
                    progress=progress,
                ),
                {"max_seq_len": {"tokens": seq_len, "source": seq_len_source}},
            ),
        )


def _recording(outcome, extra: dict):
    """``outcome`` with ``extra`` added to its manifest stats (how a default was resolved)."""
    outcome.stats.update(extra)
    return outcome
