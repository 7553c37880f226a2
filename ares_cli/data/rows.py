"""From a source's rows to validated problem records, one pass, batch by batch.

Per row, in order: the manifest's ``subset`` (rows whose columns do not match are not part of the
benchmark); the field map; the manifest's ``exclude`` list (rows left out by id, each with its reason,
every one reported); ``dedup: prompt`` (a row whose prompt text and images an earlier kept row has is
dropped and counted, before its images are written or its fields validated; a duplicate whose gold differs
from the kept row's is counted as a conflict); images resolved and checked from their headers; the record
validated (:mod:`ares_cli.data.records`), ids unique. A row that fails any check is an error naming its
file, row and field; with ``skip_invalid_rows`` it is dropped instead, and listed with its errors.

:class:`RowReport` keeps what the pass dropped and why; the loader puts it in the dataset's provenance,
``ares data check`` prints it and the stages record it in their artifact's stats.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ares_cli.data.fieldmap import FieldMap, lookup
from ares_cli.data.images import file_problems, resolve_images
from ares_cli.data.records import check_problem, normalise_answer
from ares_cli.data.tables import Table
from ares_cli.errors import InputError

MAX_EXAMPLES = 20  # duplicate conflicts listed by id in the report (all are counted)


@dataclass
class RowReport:
    """What one pass over a source kept and dropped."""

    source_rows: int = 0  # rows read from the source (parse errors included)
    subset_rows: int | None = None  # rows matching the manifest's subset, when it has one
    duplicates: int = 0
    duplicate_conflicts: list[dict] = field(default_factory=list)  # first MAX_EXAMPLES, see conflict_count
    conflict_count: int = 0
    excluded: list[dict] = field(default_factory=list)  # {id, reason, file, row}
    skipped: list[dict] = field(default_factory=list)  # {file, row, errors: [{field, message}]}

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_rows": self.source_rows,
            "subset_rows": self.subset_rows,
            "duplicates": {"dropped": self.duplicates, "conflicting_golds": self.conflict_count,
                           "conflicts": self.duplicate_conflicts},
            "excluded": self.excluded,
            "skipped_invalid": {"count": len(self.skipped), "rows": self.skipped},
        }  # fmt: skip


@dataclass
class Collected:
    records: list[dict]
    locations: list[tuple[str, int]]
    errors: list[InputError]
    report: RowReport
    columns_seen: set[str]


@dataclass(frozen=True)
class RowRules:
    """How a pass treats the rows: the manifest's subset, exclusions and dedup, and the user's choices."""

    name: str
    label: str | None
    subset: dict[str, Any] | None = None
    exclude: dict[str, str] | None = None
    dedup: str | None = None
    limit: int | None = None
    skip_invalid: bool = False


def subset_match(row: dict, subset: dict[str, Any]) -> bool:
    """Whether ``row``'s columns equal every ``subset`` value; a value written ``{regex: ...}`` matches
    the rows whose column it finds (AIME 2023 among AIME 2022-2024)."""
    for col, wanted in subset.items():
        value = row.get(col)
        if isinstance(wanted, dict) and set(wanted) == {"regex"}:
            if value is None or re.search(str(wanted["regex"]), str(value)) is None:
                return False
        elif value != wanted:
            return False
    return True


def collect(table: Table, fmap: FieldMap, rules: RowRules) -> Collected:
    """One pass over ``table``: the records, their (file, row) locations, the errors and the report."""
    report = RowReport(subset_rows=0 if rules.subset else None)
    records: list[dict] = []
    locations: list[tuple[str, int]] = []
    errors: list[InputError] = []
    columns: set[str] = set()
    first_at: dict[str, tuple[str, int]] = {}  # record id -> where it was first kept
    seen: dict[tuple, tuple] = {}  # dedup key -> (kept id, kept answer, kept row's answer value)
    image_base = _image_base(table.base_dir, fmap.image_dir)
    wanted = fmap.read_columns() | set(rules.subset or ())
    index, done, error_rows = 0, False, 0
    for batch in table.read(wanted):
        for file, row_no, row in batch:
            report.source_rows += 1
            if done:  # past the limit: rows are only counted (the expected_rows check needs them all)
                continue
            if isinstance(row, InputError):
                errors.append(row)
                error_rows += 1
                continue
            columns.update(row)
            if rules.subset:
                if not subset_match(row, rules.subset):
                    continue
                report.subset_rows += 1
            key = _source_key(row, fmap) if rules.dedup else None
            if key is not None and key in seen:
                report.duplicates += 1
                _note_conflict(report, row, fmap, seen[key], rules, index, file, row_no)
                index += 1
                continue
            record, errs = fmap.apply(
                row, index, name=rules.name, label=rules.label, default_label=rules.name
            )
            index += 1
            if "image" in row and not any(c in row for c in fmap.image_columns()):  # would load text-only
                errs["image"] = (
                    f"a record's images go in '{fmap.image_columns()[0]}' (a list of paths), not 'image': as "
                    "written this record would load without its image"
                )
            rid = _id_text(record.get("id"))
            if rules.exclude and rid in rules.exclude:
                report.excluded.append({"id": rid, "reason": rules.exclude[rid], "file": file, "row": row_no})
                continue
            if record.get("images") is not None and "images" not in errs:
                errs.update(_resolve_images(record, image_base, fmap.image_columns()))
            checked, problems = check_problem(record, file=file, row_no=row_no)
            row_errors = [InputError(msg, file=file, row=row_no, field=f) for f, msg in errs.items()]
            row_errors += [e for e in problems if e.field not in errs]
            if checked is not None and checked["id"] in first_at:
                first_file, first_row = first_at[checked["id"]]
                at = f"row {first_row}" if first_file == file else f"{first_file}, row {first_row}"
                row_errors.append(InputError(f"duplicate id {checked['id']!r} (first at {at})", file=file,
                                             row=row_no, field="id"))  # fmt: skip
            if row_errors:
                if rules.skip_invalid:
                    report.skipped.append({"file": file, "row": row_no, "id": rid, "errors": [
                        {"field": e.field, "message": _message(e)} for e in row_errors]})  # fmt: skip
                else:
                    errors.extend(row_errors)
                    error_rows += 1
            else:
                first_at[checked["id"]] = (file, row_no)
                records.append(checked)
                locations.append((file, row_no))
                if (
                    key is not None
                ):  # only a kept row stands for its prompt: a later valid copy may replace an invalid one
                    seen[key] = (checked["id"], checked["answer"], lookup(row, fmap.answer))
            if (
                rules.limit is not None
                and len(records) + (0 if rules.skip_invalid else error_rows) >= rules.limit
            ):
                done = True
                if table.num_rows is not None:  # the format knows its length: nothing more to read
                    report.source_rows = table.num_rows
                    return Collected(records, locations, errors, report, columns)
    return Collected(records, locations, errors, report, columns)


def unmatched_exclusions(report: RowReport, exclude: dict[str, str] | None) -> list[str]:
    """Excluded ids that no row of the source had (a stale manifest: the source changed)."""
    found = {e["id"] for e in report.excluded}
    return [rid for rid in exclude or {} if rid not in found]


def _source_key(row: dict, fmap: FieldMap) -> tuple | None:
    """A row's prompt as its source writes it: the problem column, the option columns and the images
    (paths, or the bytes of images stored in the source). Read before the field map runs, so a duplicate
    costs a few lookups; the options are taken before ``shuffle_options`` orders them."""
    problem = lookup(row, fmap.problem)
    if not isinstance(problem, str):
        return None  # invalid: left to validation
    options = fmap.options if isinstance(fmap.options, tuple) else (fmap.options,) if fmap.options else ()
    extra = [repr(lookup(row, c)) for c in (*options, fmap.options_text) if c]
    images = fmap.images_of(row)
    if images:
        extra += [_image_identity(v) for v in (images if isinstance(images, list) else [images])]
    return (problem, *extra)


def _note_conflict(report: RowReport, row: dict, fmap: FieldMap, kept: tuple, rules: RowRules, index: int,
                   file: str, row_no: int) -> None:  # fmt: skip
    """Count a duplicate whose gold differs from the kept row's (the field map runs only when the source's
    answer values differ: an extracted answer may still agree)."""
    kept_id, kept_answer, kept_raw = kept
    if lookup(row, fmap.answer) == kept_raw:
        return
    record, _ = fmap.apply(row, index, name=rules.name, label=rules.label, default_label=rules.name)
    answer = record.get("answer")
    try:
        answer = normalise_answer(answer)
    except ValueError:
        pass
    if answer == kept_answer:
        return
    report.conflict_count += 1
    if len(report.duplicate_conflicts) < MAX_EXAMPLES:
        report.duplicate_conflicts.append({"id": _id_text(record.get("id")), "file": file, "row": row_no,
                                           "answer": answer, "kept_id": kept_id, "kept_answer": kept_answer})  # fmt: skip


def _image_identity(value: Any) -> str:
    if isinstance(value, dict):
        data = value.get("bytes")
        if isinstance(data, (bytes, bytearray)):
            return hashlib.sha256(data).hexdigest()
        return str(value.get("path"))
    if isinstance(value, (bytes, bytearray)):
        return hashlib.sha256(value).hexdigest()
    if hasattr(value, "tobytes"):  # a decoded PIL image
        return hashlib.sha256(value.tobytes()).hexdigest()
    return str(value)


def _image_base(base_dir: Path | None, image_dir: str | None) -> Path | None:
    if base_dir is None:
        return None
    return base_dir / image_dir if image_dir else base_dir


def _resolve_images(
    record: dict, base_dir: Path | None, columns: tuple[str, ...] = ("images",)
) -> dict[str, str]:
    """Replace ``record["images"]`` by paths (relative ones under ``base_dir``); ``{"images": problem}``
    when an image is malformed, missing, empty or refused by its header (bytes from a source column
    other than ``images`` say which)."""
    try:
        record["images"] = resolve_images(record["images"], base_dir)
    except ValueError as exc:
        named = "" if columns == ("images",) else f" (column {', '.join(repr(c) for c in columns)})"
        return {"images": f"{exc}{named}"}
    problems = file_problems(record["images"])
    return {"images": "; ".join(problems)} if problems else {}


def _id_text(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    return str(int(value)) if isinstance(value, int) else str(value)


def _message(err: InputError) -> str:
    """The error's own message, without the location prefix its string carries."""
    text = str(err)
    prefix = ", ".join(p for p in (err.file, f"row {err.row}" if err.row else None,
                                   f"field '{err.field}'" if err.field else None) if p)  # fmt: skip
    return text[len(prefix) + 2 :] if prefix and text.startswith(prefix + ": ") else text
