"""Append-only keyed JSONL rows inside a partial artifact: what makes every stage resumable."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ares_cli.errors import StageFailure

__all__ = ["RowLog"]


class RowLog:
    """Append-only JSONL of keyed rows inside a partial artifact: the resume API.

    Rows already on disk are loaded (a torn last line from a killed writer is dropped); ``write`` refuses a
    key that is already present, so a resumed stage fills exactly the missing rows.
    """

    def __init__(self, path: Path, key_fields: tuple[str, ...]):
        self.path, self.key_fields = path, key_fields
        self.rows: dict[tuple, dict[str, Any]] = {}
        self._load()
        self._handle = open(path, "a", encoding="utf-8")

    def key(self, row: dict[str, Any]) -> tuple:
        try:
            return tuple(row[name] for name in self.key_fields)
        except KeyError as missing:
            raise StageFailure(f"{self.path.name}: row lacks key field {missing}") from None

    def _load(self) -> None:
        if not self.path.exists():
            return
        raw = self.path.read_bytes()
        good_end = 0
        for line in raw.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # torn write: the process died mid-line
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                break
            self.rows[self.key(row)] = row
            good_end += len(line)
        if good_end != len(raw):
            with open(self.path, "r+b") as handle:
                handle.truncate(good_end)

    def __contains__(self, key: tuple) -> bool:
        return key in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Append rows durably (flush + fsync); a key already present is an error."""
        lines = []
        for row in rows:
            key = self.key(row)
            if key in self.rows:
                raise StageFailure(f"{self.path.name}: duplicate row {key}")
            self.rows[key] = row
            lines.append(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        try:
            self._handle.write("".join(lines))
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except (
            OSError
        ) as err:  # a full disk: rows already on disk stay; a torn last line is dropped on resume
            err.filename = err.filename or str(self.path)
            raise

    def close(self, *, sort: bool = True) -> None:
        """Close; with ``sort`` rewrite the file in key order so every run gives identical bytes."""
        self._handle.close()
        if sort:
            ordered = [self.rows[key] for key in sorted(self.rows)]
            tmp = self.path.with_suffix(".tmp")
            try:
                with open(tmp, "w", encoding="utf-8") as handle:
                    for row in ordered:
                        handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
                os.replace(tmp, self.path)
            except OSError as err:  # the unsorted file is complete and stays; no stray temp file
                tmp.unlink(missing_ok=True)
                err.filename = err.filename or str(tmp)
                raise
