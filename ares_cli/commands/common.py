"""Options shared by several verbs (Annotated aliases) and the sampling-option plumbing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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


def sampling_flags(**values) -> dict:
    """Map CLI option names to config keys, dropping unset ones."""
    return {key: value for key, value in values.items() if value is not None}
