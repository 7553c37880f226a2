"""Registers the pipeline stages on the root app, in pipeline order."""

from __future__ import annotations

import typer

PIPELINE = ("passrate", "curate", "sft", "rl", "eval")
HELP = {
    "passrate": "K samples per problem, graded: pass rates, buckets and lengths.",
    "curate": "Adaptive Cold-Start: length-targeted, bracket-uniform SFT set.",
    "sft": "Cold-start supervised fine-tuning -> model artifact.",
    "rl": "RL: AEPO / PAEC / GRPO / DAPO / ... -> checkpoints, metrics, model.",
    "eval": "Maj@K, Pass@k, Avg@K, lengths, per difficulty.",
}


def register(app: typer.Typer) -> None:
    """Attach each stage's command (a function, or a Typer group for stages with subcommands)."""
    import importlib

    for name in PIPELINE:
        module = importlib.import_module(f"ares_cli.commands.{name}")
        if hasattr(module, "app"):
            app.add_typer(module.app, name=name, help=HELP[name], rich_help_panel="Pipeline")
        else:
            app.command(name, help=HELP[name], rich_help_panel="Pipeline")(module.command)
