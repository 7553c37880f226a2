"""Errors that carry their exit code; the CLI maps them to process exit status in one place.

Exit codes (docs/usage.md lists the same):

- 0   success, or up to date
- 1   a stage failed (including a full disk or a read-only artifacts root: the completed work is kept)
- 2   usage: bad options or configuration
- 3   missing or invalid input
- 4   integrity: a stored file does not match its recorded hash, or a manifest is corrupt
- 5   will not fit: ``ares plan`` found every input valid but the run's memory estimate exceeds the GPUs
- 75  busy: another run holds this stage's lock (or took it over); this run published nothing, retry later
- 130 interrupted
"""

from __future__ import annotations

import errno
from pathlib import Path

EXIT_OK = 0
EXIT_STAGE_FAILURE = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_INTEGRITY = 4
EXIT_WONT_FIT = 5  # ares plan: the inputs are valid, the estimate does not fit the planned GPUs
EXIT_LOCKED = 75  # EX_TEMPFAIL in sysexits.h: "try again later"
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


class StageLocked(AresError):
    """Another run of the same stage and key holds its lock, or took it from this run (exit 75).

    Not a failure of the stage: the other run is doing (or did) the work; rerun when it has finished.
    """

    exit_code = EXIT_LOCKED


_STORAGE_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
}


class StorageError(StageFailure):
    """A write failed because the disk is full or read-only (exit 1); the completed work stays on disk."""


def storage_error(err: OSError, path: str | Path | None = None) -> StorageError | None:
    """A one-line :class:`StorageError` for a full disk, exceeded quota or read-only file system, else None."""
    what = _STORAGE_ERRNOS.get(err.errno)
    if what is None:
        return None
    where = path if path is not None else (err.filename or "a file under the artifacts root")
    return StorageError(
        f"cannot write {where}: {what} (errno {err.errno}); what was complete is kept in the artifact's "
        f".partial directory: make room (or make it writable) and rerun the same command to resume"
    )
