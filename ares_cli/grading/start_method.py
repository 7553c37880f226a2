"""How a grading pool starts its workers: forked from a forkserver that has the grader's heavy modules
imported already, on platforms that have one (Linux, macOS); spawned elsewhere.

A spawned worker is a fresh interpreter that imports ``math_verify`` (sympy, the LaTeX parser) before it
can grade: seconds per worker, paid again for every pool and for every worker that replaces a killed one.
A forkserver pays those imports once per process; each worker is then a fork of it
(``benchmarks/bench_grading_start.py``; docs/performance.md). The pool asks for its context here and
keeps it: the process-wide default start method is never changed.

What a forked worker runs is still the caller's code: multiprocessing hands each new worker the caller's
``sys.path`` and working directory before it imports the worker's entry point and the grader, so a
worktree, an editable install or a ``--trust-grader-code`` module put on ``sys.path`` after the server
started loads as it would in a spawned worker; the pool hands it the caller's environment of the moment
too (a fork has the server's, from its start). That is why the server preloads only modules from outside
this package (installed packages such as ``math_verify``): the server imports them with the
interpreter's own path at its start, which need not find this checkout of ``ares_cli``. A preload the
server cannot import is skipped there and imported by each worker instead.

CPython keeps one forkserver per process, started by the first pool and preloading the list set before
that start. So the list is the same for every pool: the built-in graders' preloads (``math_verify``)
with the first pool's own; a later pool whose grader needs other modules still gets correct workers,
which import them themselves.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Sequence
from multiprocessing.context import BaseContext

from ares_cli.errors import UsageError

AUTO = "auto"
START_METHODS = (AUTO, "forkserver", "spawn")
_PROJECT = __name__.split(".")[0]


def server_preload(modules: Sequence[str] = ()) -> list[str]:
    """What a forkserver imports before its first fork: the built-in graders' preloads and ``modules``,
    those outside this package, once each."""
    from ares_cli.grading.registry import builtin_specs

    every = [m for spec in builtin_specs() for m in spec.preload] + list(modules)
    return [m for m in dict.fromkeys(every) if m.split(".")[0] != _PROJECT]


def worker_context(method: str = AUTO, preload: Sequence[str] = ()) -> BaseContext:
    """The multiprocessing context a pool starts its workers from. ``auto``: a forkserver preloading
    ``preload``'s modules from outside this package where the platform has one, else spawn."""
    if method not in START_METHODS:
        raise UsageError(f"unknown grading start method {method!r}; valid: {', '.join(START_METHODS)}")
    if method == AUTO:
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(server_preload(preload))
    return ctx
