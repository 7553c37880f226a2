"""Process-level I/O conventions: results on stdout, logs and progress on stderr.

The root command stores a :class:`GlobalOptions` in ``ctx.obj``; commands read it with :func:`options`
and print their machine-readable result with :func:`emit` (artifact path, or JSON with ``--json``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class GlobalOptions:
    """Options of the root command, shared by every verb."""

    artifacts_root: Path = Path("artifacts")
    verbosity: int = 0  # -1 quiet, 0 normal, >0 verbose
    json: bool = False
    _console: Any = field(default=None, repr=False)

    @property
    def console(self):
        """A rich console on stderr (plain lines when stderr is not a TTY)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._console

    def log(self, message: str, *, level: int = 0) -> None:
        """Print a log line on stderr unless the verbosity is below ``level``."""
        if self.verbosity >= level:
            self.console.print(message, markup=False)


def options(ctx) -> GlobalOptions:
    """The root options of a Typer/click context (defaults when a command runs standalone)."""
    root = ctx.find_root() if ctx is not None else None
    obj = getattr(root, "obj", None)
    return obj if isinstance(obj, GlobalOptions) else GlobalOptions()


def emit(opts: GlobalOptions, result: dict[str, Any], *, text: str | None = None) -> None:
    """Write the command's result on stdout: JSON with ``--json``, else ``text`` (default: the path)."""
    if opts.json:
        sys.stdout.write(json.dumps(result, sort_keys=True, default=str) + "\n")
    else:
        line = text if text is not None else str(result.get("path", ""))
        if line:
            sys.stdout.write(line + "\n")
    sys.stdout.flush()
