"""One entry point for problem datasets: :func:`load_problems`.

``source`` may be a manifest name (``math500``) or manifest file (``x.yaml``); a local ``.jsonl``, ``.json``
(array of objects) or ``.parquet`` file; a local ``datasets`` directory; or a hub dataset written
``hf:org/name[:config[+config...]][@split]`` (or plain ``org/name`` when no such local path exists).
Files and hub data go through a field map (identity unless given), then record validation; every problem
is reported together (exit 3). The provenance lets the artifact store hash inputs by content: the file's
sha256, or for hub data the sha256 of the canonical JSON of the records.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ares_cli.data.fieldmap import FieldMap
from ares_cli.data.images import file_problems, resolve_images
from ares_cli.data.jsonl import parse_jsonl, sha256_file, sha256_records
from ares_cli.data.manifests import HFSource, Manifest, list_manifests, load_manifest
from ares_cli.data.records import check_problems, raise_errors
from ares_cli.errors import InputError, InputErrors, UsageError

TABLE_SUFFIXES = (".jsonl", ".json", ".parquet")
_HF_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class LoadedDataset:
    """Validated problem records plus where they came from."""

    records: list[dict]
    provenance: dict[str, Any]
    manifest: Manifest | None = field(default=None, repr=False)
    locations: list[tuple[str, int]] = field(default_factory=list, repr=False)  # (file, row) per record

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)


@dataclass
class _Table:
    rows: list[dict]
    locations: list[tuple[str, int]]
    errors: list[InputError] = field(default_factory=list)
    parts: list[dict] = field(default_factory=list)


def load_problems(
    source: str | Path, *, limit: int | None = None, field_map: str | dict | None = None
) -> LoadedDataset:
    """Load, map and validate problems from ``source`` (see the module doc); ``limit`` keeps the first N.

    ``field_map`` (``"problem=question,answer=solution"`` or a mapping) overrides the manifest's map, or
    replaces the identity map of files and hub data.
    """
    if limit is not None and limit < 1:  # 0 would "succeed" with no problems at all
        raise UsageError(f"--limit must be >= 1, got {limit}")
    source = str(source)
    kind, target = _classify(source)
    if kind == "manifest":
        manifest = load_manifest(target)
        return _load_manifest(manifest, limit=limit, fmap=_field_map(field_map, manifest.field_map))
    fmap = _field_map(field_map, FieldMap())
    if kind == "file":
        path = Path(target).expanduser()
        table = read_table(path)
        prov = {"kind": "file", "name": path.stem, "path_or_id": str(path), "revision": None,
                "sha256": sha256_file(path)}  # fmt: skip
        return _finish(table, fmap, prov, name=path.stem, label=None, limit=limit)
    hf_id, configs, split = parse_hf_spec(target) if kind == "hf" else (target, (None,), None)
    table = read_hf(hf_id, configs=configs, split=split)
    name = Path(hf_id).name if kind == "dir" else hf_id.rsplit("/", 1)[-1]
    prov = {"kind": "hf", "name": name, "path_or_id": hf_id, "revision": None, "configs": list(configs),
            "split": split, "parts": table.parts}  # fmt: skip
    return _finish(table, fmap, prov, name=name, label=None, limit=limit)


def parse_hf_spec(spec: str) -> tuple[str, tuple[str | None, ...], str | None]:
    """``hf:org/name:cfg1+cfg2@split`` → ``("org/name", ("cfg1", "cfg2"), "split")``."""
    body = spec[3:] if spec.startswith("hf:") else spec
    body, _, split = body.partition("@") if "@" in body else (body, "", "")
    hf_id, _, config = body.partition(":")
    if not hf_id:
        raise UsageError(f"{spec!r}: expected hf:org/name[:config][@split]")
    configs = tuple(c for c in config.split("+") if c) or (None,)
    return hf_id, configs, split or None


def read_table(path: str | Path) -> _Table:
    """Rows of a local .jsonl/.json/.parquet file with their (file, 1-based row) locations."""
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", file=path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        parsed, errors = parse_jsonl(path)
        return _Table([r for _, r in parsed], [(str(path), n) for n, _ in parsed], errors)
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"malformed JSON ({exc})", file=path) from None
        if not isinstance(data, list):
            raise InputError("a .json dataset must be an array of objects (use .jsonl for lines)", file=path)
        table = _Table([], [])
        for i, obj in enumerate(data, start=1):
            if isinstance(obj, dict):
                table.rows.append(obj)
                table.locations.append((str(path), i))
            else:
                table.errors.append(
                    InputError(f"expected an object, got {type(obj).__name__}", file=path, row=i)
                )
        return table
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:  # pyarrow raises several types for corrupt files
            raise InputError(f"unreadable parquet ({exc})", file=path) from None
        return _Table(rows, [(str(path), i) for i in range(1, len(rows) + 1)])
    raise InputError(f"unsupported file type {suffix!r} (expected {', '.join(TABLE_SUFFIXES)})", file=path)


def read_hf(
    hf_id: str, *, configs: tuple[str | None, ...] = (None,), split: str | None, revision=None
) -> _Table:
    """Rows of a hub dataset (or local ``datasets`` directory), configs concatenated in order."""
    import datasets

    from ares_cli.data.hub import require_fetchable

    table = _Table([], [])
    if split and "+" in split:  # several splits, concatenated in order (DynaMath's ten variants)
        for part in split.split("+"):
            sub = read_hf(hf_id, configs=configs, split=part, revision=revision)
            table.rows += sub.rows
            table.locations += sub.locations
            table.parts += sub.parts
        return table
    for config in configs:
        label = f"hf:{hf_id}" + (f":{config}" if config else "") + (f"@{split}" if split else "")
        local = Path(hf_id).expanduser()
        if local.is_dir() and not any(p.is_file() for p in local.rglob("*")):
            raise InputError("the directory holds no dataset files", file=local)
        try:
            if local.is_dir() and any(
                (local / f).exists() for f in ("dataset_info.json", "dataset_dict.json")
            ):
                obj = datasets.load_from_disk(str(local))
                obj = obj[split] if split and isinstance(obj, datasets.DatasetDict) else obj
            else:
                kwargs = {"revision": revision} if revision else {}
                if not local.is_dir():  # a local folder of data files is read by `datasets`, not fetched
                    require_fetchable(hf_id, "dataset")  # not cached and no hub: fail now, not after retries
                obj = datasets.load_dataset(hf_id, name=config, split=split, **kwargs)
        except InputError as exc:
            raise InputError(str(exc), file=label) from None
        except Exception as exc:  # hub, cache and builder errors have many types
            if local.is_dir():
                cause = f" ({type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
                raise InputError(
                    f"could not read the folder's data files: {type(exc).__name__}: {exc}{cause}", file=local
                ) from None
            raise InputError(
                f"could not load dataset: {type(exc).__name__}: {exc} (offline? it must be in the HF cache, "
                "with HF_DATASETS_OFFLINE=1, or use a local file)",
                file=label,
            ) from None
        if isinstance(obj, dict):  # DatasetDict: only unambiguous without a split
            if len(obj) != 1:
                raise InputError(f"several splits ({', '.join(obj)}); name one with @split", file=label)
            split_name, obj = next(iter(obj.items()))
            label += f"@{split_name}"
        rows = obj.to_list() if hasattr(obj, "to_list") else [dict(r) for r in obj]
        table.rows.extend(rows)
        table.locations.extend((label, i) for i in range(1, len(rows) + 1))
        table.parts.append({"config": config, "split": split, "rows": len(rows)})
    return table


def _load_manifest(m: Manifest, *, limit: int | None, fmap: FieldMap) -> LoadedDataset:
    prov: dict[str, Any] = {"kind": "manifest", "name": m.name, "manifest_path": str(m.path),
                            "licence": m.licence, "expected_rows": m.expected_rows}  # fmt: skip
    if isinstance(m.source, HFSource):
        src = m.source
        table = read_hf(src.id, configs=src.configs, split=src.split, revision=src.revision)
        prov.update(path_or_id=src.id, revision=src.revision, configs=list(src.configs), split=src.split,
                    parts=table.parts)  # fmt: skip
    else:
        table = read_table(m.source.path)
        prov.update(path_or_id=str(m.source.path), revision=None, sha256=sha256_file(m.source.path))
    n = len(table.rows) + len(table.errors)
    if m.expected_rows is not None and n != m.expected_rows:
        table.errors.insert(0, InputError(
            f"source has {n} rows, the manifest expects {m.expected_rows} (wrong revision/split, or a "
            "truncated file?)", file=m.path, field="expected_rows"))  # fmt: skip
    if m.subset:
        table = select_rows(table, m.subset)
        prov["subset"] = dict(m.subset)
        if not table.rows and not table.errors:
            raise InputError(f"no row matches the subset {m.subset}", file=m.path, field="subset")
    return _finish(table, fmap, prov, name=m.name, label=m.source_label, limit=limit, manifest=m)


def select_rows(table: _Table, subset: dict[str, Any]) -> _Table:
    """The rows whose columns equal every ``subset`` value (MathVerse's vision-only version, say); a value
    written ``{regex: ...}`` keeps the rows whose column it matches (AIME 2023 among AIME 2022-2024)."""

    def match(value: Any, wanted: Any) -> bool:
        if isinstance(wanted, dict) and set(wanted) == {"regex"}:
            return value is not None and re.search(str(wanted["regex"]), str(value)) is not None
        return value == wanted

    keep = [i for i, row in enumerate(table.rows) if all(match(row.get(c), v) for c, v in subset.items())]
    return _Table(
        [table.rows[i] for i in keep], [table.locations[i] for i in keep], table.errors, table.parts
    )


def _finish(
    table: _Table, fmap: FieldMap, prov: dict, *, name: str, label: str | None, limit: int | None,
    manifest: Manifest | None = None,
) -> LoadedDataset:  # fmt: skip
    errors = list(table.errors)
    columns = set().union(*(r.keys() for r in table.rows)) if table.rows else set()
    wanted = fmap.required_columns()
    missing = [c for c in wanted if c.split(".")[0] not in columns]
    if missing and len(table.rows) > 1:  # one error per absent column, not one per row
        origin = table.locations[0][0] if table.locations else name
        listing = ", ".join(sorted(map(str, columns)))
        errors.extend(
            InputError(f"column {c!r} (for {wanted[c]}) not found in any row (columns: {listing})",
                       file=origin, field=c)
            for c in missing
        )  # fmt: skip
        raise InputErrors(errors)
    total = len(table.rows)
    if total == 0 and not errors:
        raise InputError("the dataset has no rows", file=prov.get("path_or_id"))
    rows = table.rows if limit is None else table.rows[:limit]
    mapped, map_errors = [], []
    for i, row in enumerate(rows):
        record, errs = fmap.apply(row, i, name=name, label=label, default_label=name)
        file, row_no = table.locations[i]
        if isinstance(row, dict) and "image" in row and fmap.images not in row:  # would load text-only
            errs["image"] = (
                f"a record's images go in '{fmap.images}' (a list of paths), not 'image': as written this "
                "record would load without its image"
            )
        if record.get("images") is not None and "images" not in errs:
            errs.update(_resolve_record_images(record, file, row_no))
        mapped.append(record)
        map_errors.extend(InputError(msg, file=file, row=row_no, field=f) for f, msg in errs.items())
    records, check_errors = check_problems(mapped, locations=table.locations[: len(rows)])
    seen = {(e.file, e.row, e.field) for e in map_errors}
    errors += map_errors + [e for e in check_errors if (e.file, e.row, e.field) not in seen]
    errors.sort(key=lambda e: (e.file or "", e.row or 0))
    raise_errors(errors)
    prov.update(rows=len(records), total_rows=total, limit=limit, field_map=fmap.to_dict(),
                records_sha256=sha256_records(records))  # fmt: skip
    prov.setdefault("sha256", prov["records_sha256"])
    return LoadedDataset(records=records, provenance=prov, manifest=manifest,
                         locations=table.locations[: len(records)])  # fmt: skip


def _resolve_record_images(record: dict, file: str, row_no: int) -> dict[str, str]:
    """Replace ``record["images"]`` by paths (relative ones against the dataset's directory); returns
    ``{"images": problem}`` when an image is malformed, missing or empty."""
    origin = file[3:] if file.startswith("hf:") else file
    origin = Path(parse_hf_spec(origin)[0] if file.startswith("hf:") else origin)
    base_dir = origin if origin.is_dir() else origin.parent if origin.is_file() else None
    try:
        record["images"] = resolve_images(record["images"], base_dir)
    except ValueError as exc:
        return {"images": str(exc)}
    problems = file_problems(record["images"])
    return {"images": "; ".join(problems)} if problems else {}


def _field_map(spec: str | dict | None, base: FieldMap) -> FieldMap:
    try:
        return FieldMap.parse(spec, base=base)
    except ValueError as exc:
        raise UsageError(f"--field-map: {exc}") from None


def _classify(source: str) -> tuple[str, str]:
    """``(kind, target)`` with kind in manifest | file | dir | hf."""
    if source.startswith("hf:"):
        return "hf", source
    path = Path(source).expanduser()
    suffix = path.suffix.lower()
    if path.is_dir():
        return "dir", str(path)
    if path.exists():
        if suffix in (".yaml", ".yml"):
            return "manifest", str(path)
        if suffix in TABLE_SUFFIXES:
            return "file", str(path)
        raise InputError(
            f"unsupported file type {suffix!r} (expected {', '.join(TABLE_SUFFIXES)})", file=path
        )
    if suffix in (*TABLE_SUFFIXES, ".yaml", ".yml"):
        raise InputError("file not found", file=path)
    if "/" not in source and "\\" not in source:
        return "manifest", source  # load_manifest lists the known ones when unknown
    if _HF_ID_RE.match(source.split("@")[0].split(":")[0]):
        return "hf", source
    known = ", ".join(list_manifests()) or "(none)"
    raise InputError(f"no such file, manifest or hub dataset id: {source!r}; known manifests: {known}")
