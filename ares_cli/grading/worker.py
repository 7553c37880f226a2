"""Grading worker process: loads graders by import path and grades (gold, text) tasks one at a time.

Protocol over a duplex pipe. Worker -> parent: ``("ready", pid)`` or ``("fail", message)`` once, then one
``(index, grade, detail)`` per task. Parent -> worker: a list of ``(index, target, gold, text)`` tasks, or
None to stop. Each call runs under a soft ``SIGALRM`` timer (the worker recovers by itself); calls that do
not return to the interpreter (long C loops, ignored signals) are killed by the parent's hard deadline.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection

from ares_cli.grading.graders import ERROR, TIMEOUT, normalize_grade
from ares_cli.grading.registry import GraderFn, load_target

_DETAIL_MAX = 300


class SoftTimeout(BaseException):
    """Raised in a worker by its alarm; a BaseException so graders' ``except Exception`` cannot swallow it."""


def _on_alarm(signum, frame):  # noqa: ARG001
    raise SoftTimeout()


def grade_call(fn: GraderFn, gold: str, text: str, soft_s: float) -> tuple[str, str | None]:
    """Run one grader call under a soft timer; returns (grade, detail). Must run in a main thread."""
    try:
        signal.setitimer(signal.ITIMER_REAL, soft_s)
        try:
            return normalize_grade(fn(gold, text)), None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except SoftTimeout:
        return TIMEOUT, f"grader exceeded {soft_s:.3g}s (soft timeout)"
    except (Exception, SystemExit) as e:
        return ERROR, f"{type(e).__name__}: {e}"[:_DETAIL_MAX]


def worker_main(
    conn: Connection,
    targets: Sequence[str],
    preload: Sequence[str],
    warmup: Sequence[tuple[str, str]],
    soft_s: float,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Entry point of a worker process (spawn-safe: module-level, arguments picklable). ``environ``: the
    caller's environment, taken over first (a forked worker has its forkserver's, from the server's start)."""
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills its workers
    signal.signal(signal.SIGALRM, _on_alarm)
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout disabled" notice: ours is on
    try:
        for module in preload:
            __import__(module)
        fns: dict[str, GraderFn] = {t: load_target(t) for t in targets}
        for fn in fns.values():
            for gold, text in warmup:
                fn(gold, text)
    except BaseException as e:  # noqa: BLE001 - report any start-up failure to the parent
        conn.send(("fail", f"{type(e).__name__}: {e}"[:_DETAIL_MAX]))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            tasks = conn.recv()
        except (EOFError, OSError):
            return
        if tasks is None:
            conn.close()
            os._exit(0)  # nothing to flush; skips a slow interpreter teardown with sympy loaded
        for index, target, gold, text in tasks:
            fn = fns.get(target)
            if fn is None:
                fn = fns[target] = load_target(target)
            grade, detail = grade_call(fn, gold, text, soft_s)
            conn.send((index, grade, detail))
