"""Sealed checkpoint directories: each rank's files fsynced and listed with their sha256, checked on resume.

``files.rank{r}.json`` lists every file rank r wrote (rank 0's list also covers ``state.json``) with its
size and sha256; :func:`checkpoint_problems` re-reads them, so a checkpoint truncated or altered on disk is
recognised before a run resumes from it (:func:`ares_cli.training.checkpoint.latest`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STATE = "state.json"
FILE_LIST = "files.rank{rank}.json"


def write_synced(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def seal(directory: Path, rank: int, names: list[str], entries: dict | None = None) -> dict:
    """fsync ``names`` and record their sha256 and size (added to ``entries``) in ``files.rank{rank}.json``."""
    from ares_cli.store.hashing import sha256_file

    entries = dict(entries or {})
    for name in names:
        with open(directory / name, "rb") as handle:
            os.fsync(handle.fileno())
        entries[name] = {"sha256": sha256_file(directory / name), "bytes": (directory / name).stat().st_size}
    write_synced(directory / FILE_LIST.format(rank=rank), json.dumps(entries, indent=1, sort_keys=True))
    return entries


def problems_in(path: Path, world_size: int, *, rehash: bool = True) -> list[str]:
    """What makes a checkpoint unusable: a rank's file list missing, a file missing, resized or altered."""
    from ares_cli.store.hashing import sha256_file

    problems = []
    for rank in range(world_size):
        listing = path / FILE_LIST.format(rank=rank)
        try:
            entries = json.loads(listing.read_text(encoding="utf-8"))
            items = [(name, int(e["bytes"]), str(e["sha256"])) for name, e in entries.items()]
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            problems.append(f"{listing.name} missing or unreadable")
            continue
        for name, size, digest in items:
            file = path / name
            if not file.is_file():
                problems.append(f"{name} missing")
            elif file.stat().st_size != size:
                problems.append(f"{name} has {file.stat().st_size} bytes, {size} were written")
            elif rehash and sha256_file(file) != digest:
                problems.append(f"{name} does not match its sha256")
    return problems


def checkpoint_problems(path: Path) -> list[str]:
    """Empty when ``path`` is a complete checkpoint whose every file matches the sha256 it was written with."""
    try:
        meta = json.loads((path / STATE).read_text(encoding="utf-8"))
        world_size = int(meta["world_size"])
    except (OSError, ValueError, TypeError, KeyError):
        return [f"{STATE} missing or unreadable"]
    return problems_in(path, world_size)
