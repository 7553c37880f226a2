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

from ares_cli.commands.training_stage import deepspeed_config_ref, run_training_stage
from ares_cli.console import options
from ares_cli.errors import UsageError

PANEL_IO, PANEL_RL = "Inputs", "RL"
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
        typer.Option(
            help="grpo dapo drgrpo cispo clip_cov kl_cov gspo gspo_token entropy topent aepo paec aer.",
            rich_help_panel=PANEL_RL,
        ),
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
) -> None:
    """RL: AEPO / PAEC / GRPO / DAPO / ...; checkpoints, metrics.jsonl and the final model."""
    from ares_cli.data.loader import load_problems
    from ares_cli.stages.inputs import dataset_ref, resolve_model
    from ares_cli.store.artifacts import ArtifactStore
    from ares_cli.training import tracking
    from ares_cli.training.rl import config as rlconfig
    from ares_cli.training.rl import trainer

    opts = options(ctx)
    trackers = tracking.parse_report_to(report_to)
    if force and resume:
        raise UsageError("--force and --resume contradict each other")
    flags = {"algo": algo, "steps": steps, "optim.deepspeed": str(deepspeed) if deepspeed else None}
    cfg = rlconfig.resolve_rl_config(yaml_path=config, sets=sets, flags=flags)
    store = ArtifactStore(opts.artifacts_root)
    deepspeed_ref = deepspeed_config_ref(store, cfg.optim.deepspeed) if cfg.optim.deepspeed else None
    model_path, model_ref = resolve_model(store, model)
    from ares_cli.stages.budget import model_context

    budget = rlconfig.resolve_rollout_budget(cfg, model_path, model_context(model_path))
    train = load_problems(data, limit=cfg.data_limit)
    val = load_problems(val_data, limit=cfg.val.limit) if val_data else None
    inputs = [model_ref, dataset_ref(train.records, train.provenance)]
    if val is not None:
        inputs.append(dataset_ref(val.records, val.provenance, role="val_data"))
    if deepspeed_ref is not None:
        inputs.append(deepspeed_ref)
    from ares_cli.models import check_image_support

    for loaded in (train, val) if val is not None else (train,):
        check_image_support(loaded.records, loaded.locations, model_path)

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
                ),
                budget,
            ),
        )


def _recording(outcome, budget):
    """``outcome`` with the generation budget and its source in its manifest stats."""
    outcome.stats["generation_budget"] = budget.record()
    return outcome
