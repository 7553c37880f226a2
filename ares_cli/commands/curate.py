"""`ares curate`."""

from __future__ import annotations

import typer

from ares_cli.errors import NotImplementedStage


def command(ctx: typer.Context) -> None:
    """Not implemented yet."""
    raise NotImplementedStage("'ares curate' is not implemented yet")
