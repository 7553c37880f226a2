"""Options shared by several verbs (Annotated aliases) and the sampling-option plumbing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ares_cli.errors import UsageError

ConfigFile = Annotated[
    Path | None, typer.Option("--config", help="YAML config (a stage section of a pipeline file works too).")
]  # noqa: E501
SetPairs = Annotated[
    list[str] | None, typer.Option("--set", help="Override a config key: key=value (repeatable).")
]
Force = Annotated[bool, typer.Option("--force", help="Recompute even when an up-to-date artifact exists.")]

SAMPLING = "Sampling"
Backend = Annotated[str | None, typer.Option(help="auto | hf | vllm | replay.", rich_help_panel=SAMPLING)]
Temperature = Annotated[
    float | None, typer.Option(help="Sampling temperature (0 = greedy).", rich_help_panel=SAMPLING)
]  # noqa: E501
TopP = Annotated[float | None, typer.Option("--top-p", help="Nucleus mass.", rich_help_panel=SAMPLING)]
MaxNewTokens = Annotated[
    int | None, typer.Option("--max-new-tokens", help="Generation budget.", rich_help_panel=SAMPLING)
]  # noqa: E501
Seed = Annotated[int | None, typer.Option(help="Base seed.", rich_help_panel=SAMPLING)]
SystemPrompt = Annotated[
    str | None, typer.Option("--system-prompt", help="System message.", rich_help_panel=SAMPLING)
]  # noqa: E501
PromptTemplate = Annotated[
    str | None,
    typer.Option(
        "--prompt-template", help="User-message format string with {problem}.", rich_help_panel=SAMPLING
    ),
]  # noqa: E501
Limit = Annotated[int | None, typer.Option(help="Only the first N problems.", rich_help_panel=SAMPLING)]
Grader = Annotated[
    str | None,
    typer.Option(help="Grader name, or module:function with --trust-grader-code.", rich_help_panel="Grading"),
]
TrustGraderCode = Annotated[
    bool | None,
    typer.Option(
        "--trust-grader-code",
        help="Allow a module:function grader: import and run that module's code. Never set by a file.",
        rich_help_panel="Grading",
    ),
]

LocalRank = Annotated[
    int | None,
    typer.Option(
        "--local_rank",
        "--local-rank",
        hidden=True,
        help="Set by the deepspeed launcher; must agree with LOCAL_RANK.",
    ),
]


def check_local_rank(value: int | None) -> None:
    """The ``deepspeed`` launcher passes ``--local_rank=N`` beside ``LOCAL_RANK``: accept it, set the variable
    where the launcher did not, and refuse a value that contradicts it (exit 2)."""
    import os

    if value is None:
        return
    if value < 0:
        raise UsageError(f"--local_rank={value}: a rank is >= 0")
    env = os.environ.get("LOCAL_RANK")
    if env is None:
        os.environ["LOCAL_RANK"] = str(value)
    elif env.strip() != str(value):
        raise UsageError(f"--local_rank={value} contradicts LOCAL_RANK={env} set by the launcher")


def sampling_flags(**values) -> dict:
    """Map CLI option names to config keys, dropping unset ones."""
    return {key: value for key, value in values.items() if value is not None}
