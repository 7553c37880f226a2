"""A source's rows, read in batches: local .jsonl / .json / .parquet files and hub (``datasets``) tables.

A :class:`Table` knows its label, its columns where the format declares them (parquet and hub tables do,
JSON does not), its row count where the format stores it, and yields ``(file, 1-based row, row)`` triples
batch by batch, reading only the columns asked for, so a 1.8-million-row source is never held as Python
dicts all at once. A malformed row is yielded as an :class:`~ares_cli.errors.InputError` in its place.

Layouts (``source.local.layout`` in a manifest): ``records`` (default: JSON Lines, a JSON array of objects
or a parquet table) and ``keyed_object``: one JSON object whose keys are record ids and whose values are
the records (LogicVista's ``data/dataset.json``); each key becomes the record's ``key_column`` (default
``id``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError

TABLE_SUFFIXES = (".jsonl", ".json", ".parquet")
LAYOUTS = ("records", "keyed_object")
BATCH_ROWS = 8192

Row = tuple[str, int, "dict | InputError"]


@dataclass
class Table:
    """One readable source: ``read(columns)`` yields batches of ``(file, row, row dict or error)``."""

    label: str
    read: Callable[[set[str] | None], Iterator[list[Row]]]
    columns: set[str] | None = None  # declared by the format (parquet, hub); None: known only by reading
    num_rows: int | None = None
    parts: list[dict] = field(default_factory=list)  # hub: {config, split, rows} per part read
    base_dir: Path | None = None  # where relative image paths of its rows start


def open_file(path: str | Path, *, layout: str = "records", key_column: str = "id") -> Table:
    """A local .jsonl / .json / .parquet file as a :class:`Table` (an unreadable file: InputError)."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", file=path)
    suffix = path.suffix.lower()
    if layout == "keyed_object" and suffix != ".json":
        raise InputError(f"layout keyed_object reads a .json object, not {suffix!r}", file=path)
    if suffix == ".jsonl":
        return Table(str(path), lambda cols: _jsonl_batches(path), base_dir=path.parent)
    if suffix == ".json":
        return _json_table(path, layout, key_column)
    if suffix == ".parquet":
        return _parquet_table(path)
    raise InputError(f"unsupported file type {suffix!r} (expected {', '.join(TABLE_SUFFIXES)})", file=path)


def _jsonl_batches(path: Path) -> Iterator[list[Row]]:
    label = str(path)
    batch: list[Row] = []
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115  (closed below, whatever the consumer does)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror})", file=path) from None
    with fh:
        try:
            for line_no, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    obj = InputError(
                        f"malformed JSON ({exc.msg} at column {exc.colno})", file=path, row=line_no
                    )
                if not isinstance(obj, (dict, InputError)):
                    obj = InputError(
                        f"expected a JSON object, got {type(obj).__name__}", file=path, row=line_no
                    )
                batch.append((label, line_no, obj))
                if len(batch) >= BATCH_ROWS:
                    yield batch
                    batch = []
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=path) from None
    if batch:
        yield batch


def _json_table(path: Path, layout: str, key_column: str) -> Table:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"malformed JSON ({exc})", file=path) from None
    label = str(path)
    rows: list[Row] = []
    if layout == "keyed_object":
        if not isinstance(data, dict):
            raise InputError(
                f"layout keyed_object expects one JSON object keyed by record id, got {type(data).__name__}",
                file=path,
            )
        for i, (key, obj) in enumerate(data.items(), start=1):
            if not isinstance(obj, dict):
                rows.append((label, i, InputError(f"key {key!r}: expected an object, got {type(obj).__name__}",
                                                  file=path, row=i)))  # fmt: skip
            elif key_column in obj and obj[key_column] != key:
                rows.append((label, i, InputError(
                    f"key {key!r}: the record's own {key_column!r} is {obj[key_column]!r}", file=path, row=i,
                    field=key_column)))  # fmt: skip
            else:
                rows.append((label, i, {key_column: key, **obj}))
    else:
        if not isinstance(data, list):
            hint = " (an object keyed by id: declare layout: keyed_object)" if isinstance(data, dict) else ""
            raise InputError(
                f"a .json dataset must be an array of objects{hint} (use .jsonl for lines)", file=path
            )
        for i, obj in enumerate(data, start=1):
            rows.append((label, i, obj if isinstance(obj, dict) else
                         InputError(f"expected an object, got {type(obj).__name__}", file=path, row=i)))  # fmt: skip
    return Table(label, lambda cols: _chunks(rows), num_rows=len(rows), base_dir=path.parent)


def _parquet_table(path: Path) -> Table:
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise InputError(f"unreadable parquet ({exc})", file=path) from None
    columns = set(handle.schema_arrow.names)
    label = str(path)

    def read(wanted: set[str] | None) -> Iterator[list[Row]]:
        names = sorted(columns & wanted) if wanted is not None else None
        if names == []:  # none of the wanted columns: rows without fields (their errors name what is missing)
            yield from _chunks([(label, i, {}) for i in range(1, handle.metadata.num_rows + 1)])
            return
        n = 0
        try:
            for batch in handle.iter_batches(batch_size=BATCH_ROWS, columns=names):
                rows = batch.to_pylist()
                yield [(label, n + i + 1, row) for i, row in enumerate(rows)]
                n += len(rows)
        except Exception as exc:  # a truncated row group surfaces only when it is read
            raise InputError(f"unreadable parquet ({exc})", file=path) from None

    return Table(label, read, columns=columns, num_rows=handle.metadata.num_rows, base_dir=path.parent)


def arrow_table(obj: Any, label: str, base_dir: Path | None, part: dict) -> Table:
    """A ``datasets.Dataset`` as a :class:`Table`: read through its Arrow batches (image columns arrive
    as ``{bytes, path}`` structs, not decoded), only the columns asked for."""
    columns = set(obj.column_names)

    def read(wanted: set[str] | None) -> Iterator[list[Row]]:
        names = sorted(columns & wanted) if wanted is not None else sorted(columns)
        if not names:  # none of the wanted columns: rows without fields (their errors name what is missing)
            yield from _chunks([(label, i, {}) for i in range(1, obj.num_rows + 1)])
            return
        data = obj.select_columns(names).with_format("arrow")
        n = 0
        for batch in data.iter(batch_size=BATCH_ROWS):
            rows = batch.to_pylist()
            yield [(label, n + i + 1, row) for i, row in enumerate(rows)]
            n += len(rows)

    return Table(label, read, columns=columns, num_rows=obj.num_rows, parts=[part], base_dir=base_dir)


def chain(tables: list[Table], label: str) -> Table:
    """Several tables read one after the other (hub configs and splits, concatenated in order)."""
    if len(tables) == 1:
        return tables[0]
    columns = set.union(*(t.columns for t in tables)) if all(t.columns is not None for t in tables) else None
    rows = sum(t.num_rows for t in tables) if all(t.num_rows is not None for t in tables) else None

    def read(wanted: set[str] | None) -> Iterator[list[Row]]:
        for t in tables:
            yield from t.read(wanted)

    return Table(label, read, columns=columns, num_rows=rows, parts=[p for t in tables for p in t.parts],
                 base_dir=tables[0].base_dir)  # fmt: skip


def _chunks(rows: list[Row]) -> Iterator[list[Row]]:
    for start in range(0, len(rows), BATCH_ROWS):
        yield rows[start : start + BATCH_ROWS]
