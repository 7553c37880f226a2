"""`ares rl`: RL from a model (toy-init / sft / rl artifact, directory or hub id) on a problem dataset.

Resuming is automatic: a killed run leaves ``artifacts/rl/rl-<key>.partial/checkpoints/step-N`` and the same
command continues from it (``--resume`` says so explicitly and fails when there is nothing to resume). Under
``torchrun``/``deepspeed`` every rank runs this command; rank 0 owns the artifact, the others learn its
directory from rank 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ares_cli.commands.common import LocalRank, TrustGraderCode, check_local_rank
from ares_cli.commands.training_stage import run_training_stage
from ares_cli.console import options
from ares_cli.errors import UsageError
from ares_cli.training.rl.registry import ALGORITHMS

PANEL_IO, PANEL_RL = "Inputs", "RL"
ALGO_HELP = "Algorithm and its preset: " + ", ".join(ALGORITHMS.names()) + " (default grpo; docs/config.md)."
REPORT_TO_HELP = "Metric trackers: jsonl (always), tensorboard, wandb; comma-separated."


def command(
    ctx: typer.Context,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help="Model: toy-init/sft/rl artifact id, directory or HF id.",
            rich_help_panel=PANEL_IO,
        ),
    ],
    data: Annotated[
        str,
        typer.Option(
            "--data",
            "-d",
            help="Training problems: manifest name (toy-train), file or HF id.",
            rich_help_panel=PANEL_IO,
        ),
    ],
    algo: Annotated[
        str | None,
        typer.Option(help=ALGO_HELP, rich_help_panel=PANEL_RL),
    ] = None,
    val_data: Annotated[
        str | None,
        typer.Option(
            "--val-data", help="Held-out problems for validation (toy-val).", rich_help_panel=PANEL_IO
        ),
    ] = None,
    steps: Annotated[
        int | None, typer.Option(help="RL steps (default 720).", rich_help_panel=PANEL_RL)
    ] = None,
    deepspeed: Annotated[
        Path | None,
        typer.Option(
            "--deepspeed",
            help="DeepSpeed ZeRO config (pipelines/deepspeed/zero2.json).",
            rich_help_panel=PANEL_RL,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="YAML with RL keys (or an 'rl:' section).", rich_help_panel=PANEL_IO),
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a config key: key=value, dotted for sections (loss.clip_high=0.28).",
            rich_help_panel=PANEL_RL,
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Retrain from scratch, discarding a complete or partial artifact.")
    ] = False,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Require a partial run to resume (resuming is otherwise automatic)."),
    ] = False,
    report_to: Annotated[
        str,
        typer.Option("--report-to", help=REPORT_TO_HELP, rich_help_panel=PANEL_IO),
    ] = "jsonl",
    trust_grader_code: TrustGraderCode = None,
    local_rank: LocalRank = None,
) -> None:
    """RL: AEPO / PAEC / GRPO / DAPO / ...; checkpoints, metrics.jsonl and the final model."""
    import torch

    from ares_cli.store.artifacts import ArtifactStore
    from ares_cli.training import distributed, tracking
    from ares_cli.training.rl import config as rlconfig
    from ares_cli.training.rl import trainer

    check_local_rank(local_rank)
    opts = options(ctx)
    trackers = tracking.parse_report_to(report_to)
    prepared = prepare(opts, model=model, data=data, algo=algo, val_data=val_data, steps=steps,
                       deepspeed=deepspeed, config=config, sets=sets, force=force, resume=resume,
                       report_to=report_to, world_size=distributed.launched_ranks(),
                       on_gpu=torch.cuda.is_available(), trust_grader_code=trust_grader_code)  # fmt: skip
    cfg, train, val, model_path = prepared.cfg, prepared.train, prepared.val, prepared.model_path
    budget, inputs = prepared.budget, prepared.inputs
    store = ArtifactStore(opts.artifacts_root)

    with opts.progress("rl", unit="steps") as progress:
        run_training_stage(
            opts,
            store,
            "rl",
            code_version=trainer.CODE_VERSION,
            config=rlconfig.key_config(cfg),
            inputs=inputs,
            seed=cfg.seed,
            force=force,
            require_checkpoint=resume,
            train=lambda work_dir: _recording(
                trainer.train_rl(
                    cfg,
                    model_path=model_path,
                    problems=train.records,
                    val_problems=val.records if val is not None else None,
                    out_dir=work_dir,
                    log=opts.log,
                    report_to=trackers,
                    progress=progress,
                    prompt_lengths=prepared.prompt_lengths,
                ),
                budget,
                prepared,
            ),
        )


def _recording(outcome, budget, prepared):
    """``outcome`` with the generation budget and its source, and what loading left out of the data, in
    its manifest stats."""
    from ares_cli.stages.inputs import data_stats

    outcome.stats["generation_budget"] = budget.record()
    outcome.stats["data"] = {k: data_stats(d) for k, d in (("train", prepared.train), ("val", prepared.val))
                             if d is not None}  # fmt: skip
    return outcome


def prepare(opts, *, model, data, algo=None, val_data=None, steps=None, deepspeed=None, config=None, sets=None,
            force=False, resume=False, report_to="jsonl", world_size=1, on_gpu=False, checks=None,
            hash_inputs=True, on_config=None, trust_grader_code=None, local_rank=None):  # fmt: skip
    """Every check ``ares rl`` makes before it opens its artifact, for ``world_size`` ranks (the stage runs
    it strictly; ``ares plan rl`` with a collecting checklist and no input hashing). ``local_rank``, the
    deepspeed launcher's flag, is checked by the command (``check_local_rank``); ``ares plan rl`` passes
    the stage's options here, so it is taken and not used."""
    from ares_cli.stages.checklist import Checklist
    from ares_cli.stages.prepare_rl import prepare_rl
    from ares_cli.store.artifacts import ArtifactStore
    from ares_cli.training import tracking

    checks = checks or Checklist()
    checks.run("options", lambda: _check_options(force, resume, report_to, tracking))
    flags = {"algo": algo, "steps": steps, "optim.deepspeed": str(deepspeed) if deepspeed else None,
             "grading.trust_grader_code": trust_grader_code}  # fmt: skip
    return prepare_rl(ArtifactStore(opts.artifacts_root), model=model, data=data, val_data=val_data,
                      yaml_path=config, sets=sets, flags=flags, world_size=world_size, on_gpu=on_gpu,
                      checks=checks, hash_inputs=hash_inputs, on_config=on_config)  # fmt: skip


def _check_options(force: bool, resume: bool, report_to: str, tracking) -> None:
    if force and resume:
        raise UsageError("--force and --resume contradict each other")
    tracking.parse_report_to(report_to)
