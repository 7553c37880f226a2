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
    """Empty when ``path`` is a complete checkpoint whose every file matches the sha256 it was written with.

    ``state.json`` is checked against rank 0's list before anything in it is trusted, and the world size
    it names must match the rank lists present, so a tampered file cannot send the check over 50 million
    ranks."""
    from ares_cli.store.hashing import sha256_file

    listing = path / FILE_LIST.format(rank=0)
    try:
        entry = json.loads(listing.read_text(encoding="utf-8"))[STATE]
        digest, size = str(entry["sha256"]), int(entry["bytes"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return [f"{listing.name} missing or unreadable"]
    state = path / STATE
    if not state.is_file():
        return [f"{STATE} missing or unreadable"]
    if state.stat().st_size != size or sha256_file(state) != digest:
        return [f"{STATE} does not match its sha256"]
    try:
        world_size = json.loads(state.read_text(encoding="utf-8"))["world_size"]
    except (OSError, ValueError, TypeError, KeyError):
        return [f"{STATE} missing or unreadable"]
    listed = len(list(path.glob(FILE_LIST.format(rank="*"))))
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not 1 <= world_size <= listed:
        return [f"{STATE} names world_size {world_size!r}, but {listed} rank file list(s) are present"]
    return problems_in(path, world_size)
