"""JSON Lines I/O shared by every stage (content hashes are :mod:`ares_cli.store.hashing`'s).

Readers name the file and 1-based line of every malformed row; writers are atomic (temp file + rename).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError, InputErrors
from ares_cli.store.hashing import json_default


def parse_jsonl(path: str | Path) -> tuple[list[tuple[int, dict]], list[InputError]]:
    """Parse every line of ``path``: ``([(line_no, obj), ...], [errors])``; blank lines are ignored."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", file=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=path) from None
    rows: list[tuple[int, dict]] = []
    errors: list[InputError] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(
                InputError(f"malformed JSON ({exc.msg} at column {exc.colno})", file=path, row=line_no)
            )
            continue
        if not isinstance(obj, dict):
            errors.append(
                InputError(f"expected a JSON object, got {type(obj).__name__}", file=path, row=line_no)
            )
            continue
        rows.append((line_no, obj))
    return rows, errors


def read_jsonl(path: str | Path) -> list[dict]:
    """Read a JSONL file of objects; raises InputError(s) naming each malformed line."""
    rows, errors = parse_jsonl(path)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise InputErrors(errors)
    return [obj for _, obj in rows]


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write ``rows`` as JSON Lines atomically (UTF-8, one object per line); returns the row count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies (0644), not mkstemp's 0600
    n = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False, default=json_default) + "\n")
                n += 1
        os.replace(tmp, path)
    except OSError as err:  # a full disk: name the file being written, leave no temp file
        Path(tmp).unlink(missing_ok=True)
        err.filename = err.filename or str(path)
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n
