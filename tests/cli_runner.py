"""``ares`` in the test process: the console entry point's behaviour without a fresh interpreter.

:func:`invoke_in_process` runs :data:`ares_cli.main.app` under click's runner with separate stdout and
stderr, the environment defaults of :func:`ares_cli.main.main`, and the given working directory; an
uncaught exception is written to stderr as the interpreter would (``Traceback ...``, exit 1), so tests
that assert "no traceback" still fail on one. Process-wide state a command may change (environment,
working directory, logging handlers and levels, signal handlers, torch threads and RNG state, warning
filters) is restored afterwards so one call cannot leak into the next test.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

_ENTRY_DEFAULTS = {  # as ares_cli.main.main sets them
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
}
_SIGNALS = [s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, getattr(signal, "SIGUSR1", None)) if s]


@contextlib.contextmanager
def restored_process_state(cwd: Path | None) -> Iterator[None]:
    """Snapshot what a command may change in this process and put it back on exit."""
    environ = dict(os.environ)
    old_cwd = os.getcwd()
    root = logging.getLogger()
    loggers = {name: (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
               for name, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger)}  # fmt: skip
    root_state = (root.level, list(root.handlers))
    handlers = {s: signal.getsignal(s) for s in _SIGNALS}
    py_random = random.getstate()
    torch = sys.modules.get("torch")
    torch_state = (torch.get_num_threads(), torch.random.get_rng_state()) if torch else None
    with warnings.catch_warnings():
        if cwd is not None:
            os.chdir(cwd)
        try:
            yield
        finally:
            os.chdir(old_cwd)
            os.environ.clear()
            os.environ.update(environ)
            root.setLevel(root_state[0])
            root.handlers[:] = root_state[1]
            for name, lg in list(logging.Logger.manager.loggerDict.items()):
                if not isinstance(lg, logging.Logger):
                    continue
                if name in loggers:
                    lg.level, handlers_before, lg.propagate, lg.disabled = loggers[name]
                    lg.handlers[:] = handlers_before
                else:  # created by the command: keep the logger, drop handlers bound to its streams
                    lg.handlers[:] = []
            for s, h in handlers.items():
                if h is not None:
                    signal.signal(s, h)
            random.setstate(py_random)
            torch = sys.modules.get("torch")
            if torch is not None and torch_state is not None:
                torch.set_num_threads(torch_state[0])
                torch.random.set_rng_state(torch_state[1])


def invoke_in_process(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run ``ares *args`` here; returns a CompletedProcess (returncode, stdout, stderr) like a subprocess."""
    from typer.testing import CliRunner

    from ares_cli.main import app

    merged = {k: v for k, v in _ENTRY_DEFAULTS.items() if k not in os.environ} | dict(env or {})
    with restored_process_state(cwd):
        result = CliRunner().invoke(app, list(args), env=merged, catch_exceptions=True)
    stderr = result.stderr
    code = result.exit_code
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        stderr += "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        code = 1
    elif isinstance(exc, SystemExit) and isinstance(exc.code, str):
        stderr += exc.code + "\n"
    return subprocess.CompletedProcess(["ares", *args], code, result.stdout, stderr)


def invoke_under_alarm(
    args: list[str], *, seconds: int, hang: type[Exception]
) -> subprocess.CompletedProcess:
    """:func:`invoke_in_process`, raising ``hang`` (a test's own class, which tests/hostile_tally.py counts
    as a hang) if the call has not returned after ``seconds`` (SIGALRM; main thread only)."""

    def on_alarm(signum, frame):
        raise hang(f"ares {' '.join(args)} blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        return invoke_in_process(args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
