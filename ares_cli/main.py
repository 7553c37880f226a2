"""The root ``ares`` command: shared options, command groups, and the one place errors become exit codes."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from ares_cli.commands import artifacts, data, plan, report, stages, toy
from ares_cli.console import GlobalOptions
from ares_cli.errors import EXIT_INTERRUPTED, AresError, storage_error

HELP_FLAGS = ("--help", "-h")


class AresGroup(TyperGroup):
    """Maps :class:`AresError` (and a full or read-only disk) to its exit code and Ctrl-C to 130, and keeps
    stdout for the command's result: while a command runs, anything else written there (a library's log
    line, e.g. DeepSpeed's, whose handler binds to the stdout of its import) goes to stderr; the result
    goes through :func:`~ares_cli.console.emit` to the real stdout. Help text stays on stdout."""

    def parse_args(self, ctx, args):
        ctx.meta["ares.asks_help"] = any(a in HELP_FLAGS for a in args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        ctx.meta["ares.results"] = sys.stdout
        asks_help = ctx.meta.get("ares.asks_help", False)
        try:
            with contextlib.nullcontext() if asks_help else contextlib.redirect_stdout(sys.stderr):
                return super().invoke(ctx)
        except AresError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(err.exit_code) from None
        except OSError as err:
            mapped = storage_error(err)  # disk full or read-only: one line and exit 1, never a traceback
            if mapped is None:
                raise
            typer.echo(f"error: {mapped}", err=True)
            raise typer.Exit(mapped.exit_code) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None


app = typer.Typer(
    cls=AresGroup,
    name="ares",
    help="Difficulty-adaptive reasoning RL: ARES (AdaCS + AEPO), PAEC and RLVR baselines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root(
    ctx: typer.Context,
    artifacts_root: Annotated[
        Path, typer.Option("--artifacts-root", envvar="ARES_ARTIFACTS", help="Where artifacts are stored.")
    ] = Path("artifacts"),
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="More log lines.")] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only errors on stderr.")] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Machine-readable JSON result on stdout.")
    ] = False,
) -> None:
    """Shared options; each stage reads and writes versioned artifacts under --artifacts-root."""
    ctx.obj = GlobalOptions(
        artifacts_root=artifacts_root,
        verbosity=-1 if quiet else verbose,
        json=json_output,
        results=ctx.meta.get("ares.results"),
    )


stages.register(app)
app.add_typer(artifacts.app, name="artifacts", rich_help_panel="Inspection")
app.add_typer(data.app, name="data", rich_help_panel="Inspection")
app.add_typer(plan.app, name="plan", rich_help_panel="Inspection")
app.add_typer(report.app, name="report", rich_help_panel="Inspection")
app.add_typer(toy.app, name="toy", rich_help_panel="Toy world")


def main() -> None:
    """Console-script entry point."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    try:
        app()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
    from ares_cli.training import distributed  # light: torch is imported inside its functions

    if distributed.launched_ranks() > 1:
        distributed.leave_process(code)  # a rank under torchrun / deepspeed: no interpreter teardown
    sys.exit(code)


if __name__ == "__main__":
    main()
