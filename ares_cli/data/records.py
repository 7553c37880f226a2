"""Problem records: ``{id, source, problem, answer, images?: [path], meta?: {}}``.

Validation collects every problem (each an :class:`InputError` naming file, 1-based row and field) and
raises them together; no row is ever skipped silently.

Normalisation: ids may be ints in sources and become strings; numeric answers become strings, and a float
with an integral value is written as an integer (AMC23's ``27.0`` → ``"27"``), other floats with ``repr``
(``0.5`` → ``"0.5"``). String answers are kept as given, stripped of surrounding spaces and newlines (not
form feeds or tabs: those may be a ``\\frac`` or ``\\text`` eaten by a JSON escape, which the math grader
reads back and ``ares data check`` reports).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError, InputErrors

PROBLEM_FIELDS = ("id", "source", "problem", "answer", "images", "meta")
REQUIRED_FIELDS = ("id", "source", "problem", "answer")
# Size limits of one record: far above any real problem (a 128k-token context is ~0.5M characters), low
# enough that a corrupt or hostile row is refused before it is tokenised or sent to a grader.
MAX_PROBLEM_CHARS = 1_000_000
MAX_ANSWER_CHARS = 10_000

Location = tuple["str | Path | None", int]


def normalise_id(value: Any) -> str:
    """A record id as a non-empty string (ints converted); raises ValueError otherwise."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"id must be a string or integer, got {_kind(value)}")
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("id is empty")
        return value
    raise ValueError(f"id must be a string or integer, got {_kind(value)}")


_ANSWER_SPACE = " \n\r\u00a0"


def normalise_answer(value: Any) -> str:
    """A gold answer as a non-empty string; numbers converted (integral floats as ints)."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"answer must be a string or number, got {_kind(value)}")
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        f = float(value)
        if not math.isfinite(f):
            raise ValueError(f"answer is not finite ({f})")
        return str(int(f)) if f.is_integer() else repr(f)
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("answer is empty")
        return value.strip(_ANSWER_SPACE)
    raise ValueError(f"answer must be a string or number, got {_kind(value)}")


def check_problem(row: Any, *, file: str | Path | None = None, row_no: int | None = None):
    """Validate one record: ``(normalised record or None, [errors])``."""
    if not isinstance(row, dict):
        return None, [InputError(f"expected an object, got {_kind(row)}", file=file, row=row_no)]
    errors: list[InputError] = []

    def err(field: str, message: str) -> None:
        errors.append(InputError(message, file=file, row=row_no, field=field))

    out: dict[str, Any] = {}
    for key in row:
        if key not in PROBLEM_FIELDS:
            err(str(key), f"unknown field (allowed: {', '.join(PROBLEM_FIELDS)})")
    for key in REQUIRED_FIELDS:
        if row.get(key) is None:
            err(key, "missing")
    if row.get("id") is not None:
        try:
            out["id"] = normalise_id(row["id"])
        except ValueError as exc:
            err("id", str(exc))
    for key in ("source", "problem"):
        value = row.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            err(key, f"must be a string, got {_kind(value)}")
        elif not value.strip():
            err(key, "is empty")
        elif key == "problem" and len(value) > MAX_PROBLEM_CHARS:
            err(key, f"is {len(value):,} characters, over the {MAX_PROBLEM_CHARS:,}-character limit")
        else:
            out[key] = value
    if row.get("answer") is not None:
        try:
            out["answer"] = normalise_answer(row["answer"])
        except ValueError as exc:
            err("answer", str(exc))
        else:
            if len(out["answer"]) > MAX_ANSWER_CHARS:
                err(
                    "answer",
                    f"is {len(out['answer']):,} characters, over the {MAX_ANSWER_CHARS:,}-character limit",
                )
    images = row.get("images")
    if images is not None:
        if not isinstance(images, (list, tuple)) or not all(isinstance(p, str) and p for p in images):
            err("images", "must be a list of non-empty path strings")
        else:
            out["images"] = list(images)
    meta = row.get("meta")
    if meta is not None:
        if not isinstance(meta, dict):
            err("meta", f"must be an object, got {_kind(meta)}")
        elif isinstance(meta.get("difficulty"), (dict, list)):  # a breakdown key: it must be hashable
            err("meta.difficulty", f"must be a string or number, got {_kind(meta['difficulty'])}")
        else:
            out["meta"] = dict(meta)
    return (None if errors else out), errors


def check_problems(
    rows: Sequence[Any], *, file: str | Path | None = None, locations: Sequence[Location] | None = None
) -> tuple[list[dict], list[InputError]]:
    """Validate records and id uniqueness without raising: ``(valid records, all errors)``.

    ``locations`` gives ``(file, 1-based row)`` per record; by default ``(file, index + 1)``.
    """
    if locations is not None and len(locations) != len(rows):
        raise ValueError("locations must have one entry per row")
    records: list[dict] = []
    errors: list[InputError] = []
    first_seen: dict[str, Location] = {}
    for i, row in enumerate(rows):
        where_file, row_no = locations[i] if locations is not None else (file, i + 1)
        record, row_errors = check_problem(row, file=where_file, row_no=row_no)
        errors.extend(row_errors)
        rid = record["id"] if record else _safe_id(row)
        if rid is not None:
            if rid in first_seen:
                first_file, first_row = first_seen[rid]
                at = f"row {first_row}" if first_file == where_file else f"{first_file}, row {first_row}"
                errors.append(
                    InputError(
                        f"duplicate id {rid!r} (first at {at})", file=where_file, row=row_no, field="id"
                    )
                )
                continue
            first_seen[rid] = (where_file, row_no)
        if record is not None:
            records.append(record)
    return records, errors


def validate_problems(
    rows: Sequence[Any], *, file: str | Path | None = None, locations: Sequence[Location] | None = None
) -> list[dict]:
    """Validate and normalise records; raises :class:`InputErrors` listing every problem found."""
    records, errors = check_problems(rows, file=file, locations=locations)
    raise_errors(errors)
    return records


def raise_errors(errors: list[InputError]) -> None:
    """Raise all ``errors`` together as :class:`InputErrors` (each keeps its file, row and field)."""
    if errors:
        raise InputErrors(errors)


def _safe_id(row: Any) -> str | None:
    try:
        return normalise_id(row.get("id")) if isinstance(row, dict) else None
    except ValueError:
        return None


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def most_images(problems: list[dict[str, Any]]) -> int:
    """The largest number of images any one problem has (0 for a text dataset)."""
    return max((len(p.get("images") or ()) for p in problems), default=0)
