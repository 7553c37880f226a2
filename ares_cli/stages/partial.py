"""A refused run leaves nothing behind: drop a fresh partial directory that holds only its lock file."""

from __future__ import annotations

import shutil

from ares_cli.store.artifacts import LOCK_FILE


def discard_if_empty(run) -> bool:
    """Release ``run``'s lock and remove its work directory when nothing but the lock was written.

    Called when a stage fails before producing anything (an input refused after the stage opened), so no
    empty ``.partial`` directory is left to look like a resumable run. Returns whether it removed one.
    """
    work_dir = run.work_dir
    if not work_dir.is_dir() or any(child.name != LOCK_FILE for child in work_dir.iterdir()):
        return False
    run.release()
    shutil.rmtree(work_dir, ignore_errors=True)
    try:
        work_dir.parent.rmdir()  # the stage's directory too, when this run was its first
    except OSError:
        pass
    return True
