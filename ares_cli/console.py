"""Process-level I/O conventions: results on stdout, logs and progress on stderr.

The root command stores a :class:`GlobalOptions` in ``ctx.obj``; commands read it with :func:`options`
and print their machine-readable result with :func:`emit` (artifact path, or JSON with ``--json``).
Long stages report through :meth:`GlobalOptions.progress`: a rich bar with rate and ETA when stderr is a
terminal, the plain lines of a log otherwise (cron, CI, files), nothing with ``-q``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOG_WIDTH = 10_000  # columns of a console writing to a file or pipe: wide enough for any table


@dataclass
class GlobalOptions:
    """Options of the root command, shared by every verb."""

    artifacts_root: Path = Path("artifacts")
    verbosity: int = 0  # -1 quiet, 0 normal, >0 verbose
    json: bool = False
    results: Any = None  # the stream results go to (stdout as the command started; see main.AresGroup)
    _console: Any = field(default=None, repr=False)

    @property
    def result_stream(self):
        """Where the command's result goes: the stdout the command started with (see main.AresGroup)."""
        return self.results or sys.stdout

    @property
    def console(self):
        """A rich console on stderr (plain lines when stderr is not a TTY; then tables are printed at their
        full width, not cut to 80 columns, unless ``COLUMNS`` sets one)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False, soft_wrap=True)
            if not self._console.is_terminal and not os.environ.get("COLUMNS"):
                self._console.width = LOG_WIDTH  # a log: tables at full width, never squeezed to 80
        return self._console

    def log(self, message: str, *, level: int = 0) -> None:
        """Print a log line on stderr unless the verbosity is below ``level``."""
        if self.verbosity >= level:
            self.console.print(message, markup=False)

    def progress(self, description: str, unit: str = "steps") -> Progress:
        """A :class:`Progress` for one task on this process's stderr (use as a context manager)."""
        return Progress(self, description, unit)


class Progress:
    """One task's progress: a bar with rate, ETA and the current phase on a TTY, plain lines otherwise.

    Call it as ``progress(done, total, seconds)`` (the sampling stages' callback), or drive it with
    :meth:`update` and :meth:`phase` (the training loops). Plain mode prints only the counting lines that
    callers do not already log (``__call__``); the bar is drawn below log lines, which keep scrolling.
    """

    def __init__(self, opts: GlobalOptions, description: str, unit: str):
        self.opts, self.description, self.unit = opts, description, unit
        self.live = opts.verbosity >= 0 and opts.console.is_terminal
        self._bar = self._task = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __call__(self, done: int, total: int, seconds: float) -> None:
        if self.live:
            self.update(done, total=total)
        else:
            self.opts.log(f"  {done}/{total} {self.unit}  {seconds:.1f}s")

    def update(self, completed: int, *, total: int | None = None, phase: str | None = None) -> None:
        """Set the count (and the total, and the phase shown beside the bar); a no-op without a TTY.

        The first call starts the bar at ``completed``, so a resumed run's rate counts only its own steps."""
        if not self.live:
            return
        if self._bar is None:
            self._start(completed, total)
        fields = {} if phase is None else {"phase": phase}
        self._bar.update(self._task, completed=completed, total=total, **fields)

    def phase(self, name: str) -> None:
        """Show the phase the current step is in (generate, grade, forward, backward, ...)."""
        if self.live and self._bar is not None:
            self._bar.update(self._task, phase=name)

    def _start(self, completed: int, total: int | None) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        rate, eta = _rate_and_eta_columns(self.unit)
        self._bar = Bar(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(self.unit),
            rate,
            TimeElapsedColumn(),
            eta,
            TextColumn("[magenta]{task.fields[phase]}"),
            console=self.opts.console,
            speed_estimate_period=3600.0,  # RL steps take minutes: average over the last hour
        )
        self._bar.start()
        self._task = self._bar.add_task(self.description, total=total, completed=completed, phase="")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def options(ctx) -> GlobalOptions:
    """The root options of a Typer/click context (defaults when a command runs standalone)."""
    root = ctx.find_root() if ctx is not None else None
    obj = getattr(root, "obj", None)
    return obj if isinstance(obj, GlobalOptions) else GlobalOptions()


def emit(opts: GlobalOptions, result: dict[str, Any], *, text: str | None = None) -> None:
    """Write the command's result on stdout: JSON with ``--json``, else ``text`` (default: the path)."""
    out = opts.result_stream
    if opts.json:
        out.write(json.dumps(result, sort_keys=True, default=str) + "\n")
    else:
        line = text if text is not None else str(result.get("path", ""))
        if line:
            out.write(line + "\n")
    out.flush()


def error_lines(messages: list[str]) -> None:
    """One ``error: <message>`` line per message on stderr, the form :class:`ares_cli.main.AresGroup`
    gives a raised error (printed whatever the verbosity: ``-q`` keeps errors)."""
    for message in messages:
        sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()


def _rate_and_eta_columns(unit: str) -> tuple:
    """Two rich columns: items per second (per minute when slower than one a second), and the time
    left at that rate as ``eta H:MM:SS`` (rich is imported here, when a bar is first drawn)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task):
            speed = task.speed
            if not speed:
                return Text(f"-- {unit}/s", style="cyan")
            if speed < 1:
                return Text(f"{speed * 60:.2f} {unit}/min", style="cyan")
            return Text(f"{speed:.1f} {unit}/s", style="cyan")

    class Eta(ProgressColumn):
        def render(self, task):
            left = task.time_remaining
            if left is None:
                return Text("eta -:--:--", style="yellow")
            left = int(left)
            return Text(f"eta {left // 3600}:{left % 3600 // 60:02d}:{left % 60:02d}", style="yellow")

    return Rate(), Eta()
