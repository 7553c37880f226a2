"""``ares plan rl|sft|passrate|eval <the stage's own arguments>``: check a run and size it before it takes a GPU.

Each subcommand takes exactly its stage's options (built from the stage command's own signature) plus
``--gpus``, ``--nodes``, ``--gpu-memory`` and ``--throughput``, runs the stage's preparation with a
collecting checklist and the planning checks (:mod:`ares_cli.planning`), prints one report (tables, or
JSON with ``ares --json plan ...``) on stdout and exits 0 (ready), 2/3/4 (a check failed) or 5 (will not
fit); a refused plan also writes one ``error:`` line per failure on stderr, as every command does. It
writes no artifact and reads no weights.
"""

from __future__ import annotations

import inspect
import typing
from typing import Annotated

import typer

from ares_cli.console import emit, error_lines, options

app = typer.Typer(no_args_is_help=True, help="Check a stage's run and size its memory before it takes a GPU.")
PANEL = "Plan"
PLAN_OPTIONS = [
    inspect.Parameter("gpus", inspect.Parameter.KEYWORD_ONLY, default=1, annotation=Annotated[
        int, typer.Option("--gpus", min=1, max=1024, help="GPUs per node.", rich_help_panel=PANEL)]),
    inspect.Parameter("nodes", inspect.Parameter.KEYWORD_ONLY, default=1, annotation=Annotated[
        int, typer.Option("--nodes", min=1, max=65536, help="Nodes.", rich_help_panel=PANEL)]),
    inspect.Parameter("gpu_memory", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        str | None, typer.Option("--gpu-memory", help="Memory per GPU, e.g. 80GiB (default: this machine's "
                                 "GPU, else 80GiB).", rich_help_panel=PANEL)]),
    inspect.Parameter("throughput", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        str | None, typer.Option("--throughput", help="Tokens/s per GPU, or an rl/sft artifact whose "
                                 "metrics give the measured rate (time per step).", rich_help_panel=PANEL)]),
]  # fmt: skip
PLAN_NAMES = tuple(p.name for p in PLAN_OPTIONS)


def planned(stage_command, planner, name: str):
    """A command with ``stage_command``'s parameters plus the plan options; ``planner(opts, args, target)``
    returns the report."""
    hints = typing.get_type_hints(stage_command, include_extras=True)
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in inspect.signature(stage_command).parameters.values()]  # fmt: skip

    def command(ctx: typer.Context, **kwargs) -> None:
        from ares_cli.planning.target import make_target

        opts = options(ctx)
        target = make_target(opts, **{k: kwargs.pop(k) for k in PLAN_NAMES})
        report = planner(opts, kwargs, target)
        if opts.json:
            emit(opts, report.to_json())
        else:
            from rich.console import Console

            from ares_cli.planning.report import render

            render(report, Console(file=opts.result_stream, highlight=False, soft_wrap=False, width=None))
        error_lines(report.failures())  # a refused plan says why on stderr too, where a log looks
        raise typer.Exit(report.exit_code)

    command.__signature__ = inspect.Signature([*params, *PLAN_OPTIONS])
    command.__annotations__ = {p.name: p.annotation for p in (*params, *PLAN_OPTIONS)}
    command.__doc__ = (f"Check `ares {name}` with these arguments and size its memory per GPU; "
                       "exit 0 ready, 2/3/4 a check failed, 5 will not fit.")  # fmt: skip
    return command


def _rl(opts, args, target):
    from ares_cli.commands import rl
    from ares_cli.planning.rl import plan_rl

    return plan_rl(lambda **kw: rl.prepare(opts, **args, **kw), target)


def _sft(opts, args, target):
    from ares_cli.commands import sft
    from ares_cli.planning.sft import plan_sft

    return plan_sft(lambda **kw: sft.prepare(opts, **args, **kw), target)


def _passrate(opts, args, target):
    from ares_cli.commands import passrate
    from ares_cli.planning.sampling import plan_passrate

    return plan_passrate(opts, args, target, resolve_config=passrate.resolve_config)


def _eval(opts, args, target):
    from ares_cli.commands import eval as eval_command
    from ares_cli.planning.sampling import plan_eval

    return plan_eval(opts, args, target, command=eval_command)


def register() -> None:
    from ares_cli.commands import eval as eval_command
    from ares_cli.commands import passrate, rl, sft

    for name, stage_command, planner in (("rl", rl.command, _rl), ("sft", sft.command, _sft),
                                         ("passrate", passrate.passrate_command, _passrate),
                                         ("eval", eval_command.command, _eval)):  # fmt: skip
        app.command(name)(planned(stage_command, planner, name))


register()
