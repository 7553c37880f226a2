"""Errors that carry their exit code; the CLI maps them to process exit status in one place."""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0
EXIT_STAGE_FAILURE = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_INTEGRITY = 4
EXIT_INTERRUPTED = 130


class AresError(Exception):
    """Base error: a message for the user and the exit code the CLI returns."""

    exit_code = EXIT_STAGE_FAILURE


class StageFailure(AresError):
    """A stage ran and failed (exit 1)."""


class NotImplementedStage(StageFailure):
    """A stage that a later piece of work builds (exit 1, never fake output)."""


class UsageError(AresError):
    """Bad options or configuration (exit 2)."""

    exit_code = EXIT_USAGE


class InputError(AresError):
    """Missing or invalid input; names the file, row and field where known (exit 3)."""

    exit_code = EXIT_INPUT

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        row: int | None = None,
        field: str | None = None,
    ):
        self.file, self.row, self.field = (str(file) if file is not None else None), row, field
        where = []
        if file is not None:
            where.append(str(file))
        if row is not None:
            where.append(f"row {row}")
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__(f"{': '.join([', '.join(where), message]) if where else message}")


class InputErrors(InputError):
    """Several input problems found in one validation pass, reported together (exit 3)."""

    def __init__(self, errors: list[InputError], *, limit: int = 50):
        self.errors = errors
        lines = [str(e) for e in errors[:limit]]
        if len(errors) > limit:
            lines.append(f"... and {len(errors) - limit} more")
        AresError.__init__(self, f"{len(errors)} invalid input(s):\n  " + "\n  ".join(lines))
        self.file, self.row, self.field = None, None, None


class IntegrityError(AresError):
    """A stored file does not match its recorded hash (exit 4)."""

    exit_code = EXIT_INTEGRITY
