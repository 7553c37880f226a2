"""`ares eval`."""

from __future__ import annotations

import typer

from ares_cli.errors import NotImplementedStage


def command(ctx: typer.Context) -> None:
    """Not implemented yet."""
    raise NotImplementedStage("'ares eval' is not implemented yet")
