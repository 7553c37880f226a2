"""Reading files nobody vouches for: regular files only, bounded in size, JSON bounded in depth.

A model directory, a DeepSpeed file or a ``--throughput`` source is read before anything checks it. A
FIFO named ``config.json`` would block ``open()`` forever, a directory raises ``IsADirectoryError``, a
sparse multi-GB file is read whole and a deeply nested JSON file raises ``RecursionError`` inside
``json``. Every reader here refuses each of those with an :class:`InputError` (exit 3) naming the file,
from ``os.stat`` and a non-blocking open, before reading a byte.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError

MAX_JSON_BYTES = 64 * 1024 * 1024  # a config, manifest or DeepSpeed file is KBs; 64 MiB is ample
MAX_JSON_DEPTH = 64  # the deepest real config (DeepSpeed, HF) nests under 10 levels


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def regular_file_size(path: str | Path, *, what: str = "file") -> int:
    """The size of ``path`` if it is a regular file (symlinks followed); InputError otherwise."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{what} not found", file=path) from None
    except OSError as exc:
        raise InputError(f"{what} cannot be read ({exc.strerror or exc})", file=path) from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{what} is {_kind(info.st_mode)}, not a regular file", file=path)
    return info.st_size


def read_bounded(path: str | Path, *, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; InputError naming the file otherwise.

    The open is non-blocking, so a file swapped for a FIFO between ``stat`` and ``open`` cannot hang.
    """
    path = Path(path)
    size = regular_file_size(path, what=what)
    if size > max_bytes:
        raise InputError(f"{what} is {size:,} bytes, over the {max_bytes:,}-byte limit", file=path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(f"{what} cannot be opened ({exc.strerror or exc})", file=path) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise InputError(f"{what} is not a regular file", file=path)
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputError(f"{what} grew past the {max_bytes:,}-byte limit while read", file=path)
    return data


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0), counted without recursion."""
    depth, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            stack.append((child, level + 1))
        if isinstance(item, (dict, list)):
            depth = max(depth, level + 1)
    return depth


def parse_json_bounded(
    text: str | bytes, *, source: str | Path, max_depth: int = MAX_JSON_DEPTH, what: str = "JSON"
) -> Any:
    """Parse JSON text, refusing bad syntax, non-finite literals and nesting deeper than ``max_depth``."""

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        value = json.loads(text, parse_constant=no_constant)
    except RecursionError:
        raise InputError(f"{what} nests deeper than {max_depth} levels", file=source) from None
    except UnicodeDecodeError:
        raise InputError(f"{what} is not UTF-8 text", file=source) from None
    except ValueError as exc:
        raise InputError(f"{what} is not valid JSON ({exc})", file=source) from None
    if json_depth(value) > max_depth:
        raise InputError(f"{what} nests deeper than {max_depth} levels", file=source)
    return value


def load_json_bounded(
    path: str | Path,
    *,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
    what: str = "JSON file",
) -> Any:
    """A JSON file read through :func:`read_bounded` and parsed by :func:`parse_json_bounded`."""
    data = read_bounded(path, max_bytes=max_bytes, what=what)
    return parse_json_bounded(data, source=path, max_depth=max_depth, what=what)
