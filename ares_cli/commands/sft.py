"""`ares sft`: cold-start fine-tune a model on a curate artifact (or any chat JSONL) -> an `sft` artifact.

Resuming is automatic: a killed run leaves ``artifacts/sft/sft-<key>.partial/checkpoints/step-N`` and the
same command continues from it. Under ``torchrun``/``deepspeed`` every rank runs this command; rank 0 owns
the artifact (lock, manifest), the others learn its directory from rank 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ares_cli.commands.common import LocalRank, check_local_rank
from ares_cli.commands.training_stage import run_training_stage
from ares_cli.console import options

PANEL_IO, PANEL_TRAIN = "Inputs", "Training"


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
    local_rank: LocalRank = None,
) -> None:
    """Cold-start supervised fine-tuning: loss on assistant tokens only; resumes a killed run automatically."""
    import torch

    from ares_cli.config import to_dict
    from ares_cli.store.artifacts import ArtifactStore
    from ares_cli.training import distributed, sft, tracking

    check_local_rank(local_rank)
    opts = options(ctx)
    trackers = tracking.parse_report_to(report_to)
    prepared = prepare(opts, model=model, data=data, config=config, sets=sets, epochs=epochs, lr=lr,
                       batch_size=batch_size, max_steps=max_steps, deepspeed=deepspeed, report_to=report_to,
                       world_size=distributed.launched_ranks(), on_gpu=torch.cuda.is_available())  # fmt: skip
    cfg, model_dir, data_path, inputs = prepared.cfg, prepared.model_path, prepared.data_path, prepared.inputs
    seq_len, seq_len_source = cfg.max_seq_len, prepared.seq_len_source
    store = ArtifactStore(opts.artifacts_root)

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


def prepare(opts, *, model, data, config=None, sets=None, epochs=None, lr=None, batch_size=None, max_steps=None,
            deepspeed=None, force=False, report_to="jsonl", world_size=1, on_gpu=False, checks=None,
            hash_inputs=True, local_rank=None):  # fmt: skip
    """Every check ``ares sft`` makes before it opens its artifact, for ``world_size`` ranks (the stage runs
    it strictly; ``ares plan sft`` with a collecting checklist and no input hashing). ``local_rank``, the
    deepspeed launcher's flag, is checked by the command (``check_local_rank``); ``ares plan sft`` passes
    the stage's options here, so it is taken and not used."""
    from ares_cli.stages.checklist import Checklist
    from ares_cli.stages.prepare_sft import prepare_sft
    from ares_cli.store.artifacts import ArtifactStore
    from ares_cli.training import tracking

    checks = checks or Checklist()
    checks.run("options", lambda: tracking.parse_report_to(report_to))
    flags = {"epochs": epochs, "lr": lr, "batch_size": batch_size, "max_steps": max_steps,
             "deepspeed": str(deepspeed) if deepspeed else None}  # fmt: skip
    return prepare_sft(ArtifactStore(opts.artifacts_root), model=model, data=data, yaml_path=config, sets=sets,
                       flags=flags, world_size=world_size, on_gpu=on_gpu, checks=checks,
                       hash_inputs=hash_inputs)  # fmt: skip
