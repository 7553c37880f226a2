"""One entry point for problem datasets: :func:`load_problems`.

``source`` may be a manifest name (``math500``) or manifest file (``x.yaml``); a local ``.jsonl``, ``.json``
(array of objects) or ``.parquet`` file; a local ``datasets`` directory; or a hub dataset written
``hf:org/name[:config[+config...]][@split]`` (or plain ``org/name`` when no such local path exists). A
bare name that is a known manifest is the manifest, even where the working directory holds a file or
folder of that name (which one was taken is in the provenance's ``resolved``; write ``./name`` for the
folder). Files and hub data go through a field map (identity unless given), then record validation, in
one pass over the source's batches (:mod:`ares_cli.data.rows`); every problem is reported together (exit
3), or with ``skip_invalid_rows`` every invalid row is dropped and listed. The provenance lets the
artifact store hash inputs by content: the file's sha256, or for hub data the sha256 of the canonical
JSON of the records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ares_cli.data import tables
from ares_cli.data.fieldmap import FieldMap
from ares_cli.data.manifests import HFSource, Manifest, list_manifests, load_manifest
from ares_cli.data.records import raise_errors
from ares_cli.data.rows import RowRules, collect, subset_match, unmatched_exclusions
from ares_cli.errors import InputError, InputErrors, UsageError
from ares_cli.store.hashing import sha256_file, sha256_records

TABLE_SUFFIXES = tables.TABLE_SUFFIXES
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
    """Rows held in memory with their (file, row) locations (small tables and tests)."""

    rows: list[dict]
    locations: list[tuple[str, int]]
    errors: list[InputError] = field(default_factory=list)
    parts: list[dict] = field(default_factory=list)


def load_problems(
    source: str | Path, *, limit: int | None = None, field_map: str | dict | None = None,
    skip_invalid_rows: bool = False,
) -> LoadedDataset:  # fmt: skip
    """Load, map and validate problems from ``source`` (see the module doc); ``limit`` keeps the first N.

    ``field_map`` (``"problem=question,answer=solution"`` or a mapping) overrides the manifest's map, or
    replaces the identity map of files and hub data. ``skip_invalid_rows`` drops each invalid row instead
    of failing, listing every one in ``provenance["rows_report"]["skipped_invalid"]``.
    """
    if limit is not None and limit < 1:  # 0 would "succeed" with no problems at all
        raise UsageError(f"--limit must be >= 1, got {limit}")
    source = str(source)
    kind, target, note = _classify(source)
    if kind == "manifest":
        manifest = load_manifest(target)
        fmap = _field_map(field_map, manifest.field_map)
        loaded = _load_manifest(manifest, limit=limit, fmap=fmap, skip_invalid=skip_invalid_rows)
    else:
        fmap = _field_map(field_map, FieldMap())
        rules_name = Path(target).expanduser().stem
        if kind == "file":
            path = Path(target).expanduser()
            table = tables.open_file(path)
            prov = {"kind": "file", "name": path.stem, "path_or_id": str(path), "revision": None,
                    "sha256": sha256_file(path)}  # fmt: skip
        else:
            hf_id, configs, split = parse_hf_spec(target) if kind == "hf" else (target, (None,), None)
            table = open_hf(hf_id, configs=configs, split=split)
            rules_name = Path(hf_id).name if kind == "dir" else hf_id.rsplit("/", 1)[-1]
            prov = {"kind": "hf", "name": rules_name, "path_or_id": hf_id, "revision": None,
                    "configs": list(configs), "split": split, "parts": table.parts}  # fmt: skip
        rules = RowRules(name=rules_name, label=None, limit=limit, skip_invalid=skip_invalid_rows)
        loaded = _finish(table, fmap, prov, rules)
    if note:
        loaded.provenance["resolved"] = note
    return loaded


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
    """Rows of a local .jsonl/.json/.parquet file with their (file, 1-based row) locations, in memory."""
    return _materialise(tables.open_file(path))


def read_hf(
    hf_id: str, *, configs: tuple[str | None, ...] = (None,), split: str | None, revision=None
) -> _Table:
    """Rows of a hub dataset (or local ``datasets`` directory), configs concatenated in order, in memory."""
    table = open_hf(hf_id, configs=configs, split=split, revision=revision)
    out = _materialise(table)
    out.parts = table.parts
    return out


def open_hf(
    hf_id: str, *, configs: tuple[str | None, ...] = (None,), split: str | None, revision=None
) -> tables.Table:
    """A hub dataset (or local ``datasets`` directory) as a :class:`~ares_cli.data.tables.Table`: ``+``-joined
    splits and, within each, the configs, concatenated in order; read later, in Arrow batches."""
    import datasets

    from ares_cli.data.hub import require_fetchable

    parts = []
    for part_split in (
        split.split("+") if split and "+" in split else [split]
    ):  # splits, then configs, in order
        for config in configs:
            label = (
                f"hf:{hf_id}" + (f":{config}" if config else "") + (f"@{part_split}" if part_split else "")
            )
            local = Path(hf_id).expanduser()
            if local.is_dir() and not any(p.is_file() for p in local.rglob("*")):
                raise InputError("the directory holds no dataset files", file=local)
            try:
                if local.is_dir() and any(
                    (local / f).exists() for f in ("dataset_info.json", "dataset_dict.json")
                ):
                    obj = datasets.load_from_disk(str(local))
                    obj = obj[part_split] if part_split and isinstance(obj, datasets.DatasetDict) else obj
                else:
                    kwargs = {"revision": revision} if revision else {}
                    if not local.is_dir():  # a local folder of data files is read by `datasets`, not fetched
                        require_fetchable(
                            hf_id, "dataset"
                        )  # not cached and no hub: fail now, not after retries
                    obj = datasets.load_dataset(hf_id, name=config, split=part_split, **kwargs)
            except InputError as exc:
                raise InputError(str(exc), file=label) from None
            except Exception as exc:  # hub, cache and builder errors have many types
                if local.is_dir():
                    cause = f" ({type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
                    raise InputError(f"could not read the folder's data files: {type(exc).__name__}: {exc}{cause}",
                                     file=local) from None  # fmt: skip
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
            base = local if local.is_dir() else None
            part = {"config": config, "split": part_split, "rows": obj.num_rows}
            parts.append(tables.arrow_table(obj, label, base, part))
    return tables.chain(parts, f"hf:{hf_id}")


def _load_manifest(m: Manifest, *, limit: int | None, fmap: FieldMap, skip_invalid: bool) -> LoadedDataset:
    prov: dict[str, Any] = {"kind": "manifest", "name": m.name, "manifest_path": str(m.path),
                            "licence": m.licence, "expected_rows": m.expected_rows}  # fmt: skip
    if isinstance(m.source, HFSource):
        src = m.source
        table = open_hf(src.id, configs=src.configs, split=src.split, revision=src.revision)
        prov.update(path_or_id=src.id, revision=src.revision, configs=list(src.configs), split=src.split,
                    parts=table.parts)  # fmt: skip
    else:
        table = tables.open_file(m.source.path, layout=m.source.layout, key_column=m.source.key_column)
        prov.update(path_or_id=str(m.source.path), revision=None, sha256=sha256_file(m.source.path))
    rules = RowRules(name=m.name, label=m.source_label, subset=m.subset, exclude=m.exclude, dedup=m.dedup,
                     limit=limit, skip_invalid=skip_invalid)  # fmt: skip
    return _finish(table, fmap, prov, rules, manifest=m)


def select_rows(table: _Table, subset: dict[str, Any]) -> _Table:
    """The rows whose columns equal every ``subset`` value (MathVerse's vision-only version, say); a value
    written ``{regex: ...}`` keeps the rows whose column it matches (AIME 2023 among AIME 2022-2024)."""
    keep = [i for i, row in enumerate(table.rows) if subset_match(row, subset)]
    return _Table(
        [table.rows[i] for i in keep], [table.locations[i] for i in keep], table.errors, table.parts
    )


def _finish(
    table: tables.Table, fmap: FieldMap, prov: dict, rules: RowRules, manifest: Manifest | None = None
) -> LoadedDataset:
    wanted = fmap.required_columns()
    if table.columns is not None and (table.num_rows or 0) > 1:
        _raise_missing(wanted, table.columns, table.label)  # declared by the format: fail before reading
    got = collect(table, fmap, rules)
    errors, report = list(got.errors), got.report
    if table.columns is None and report.source_rows > 1:
        _raise_missing(wanted, got.columns_seen, table.label, errors)
    m = manifest
    if m is not None and m.expected_rows is not None and report.source_rows != m.expected_rows:
        errors.insert(0, InputError(
            f"source has {report.source_rows} rows, the manifest expects {m.expected_rows} (wrong revision/split, "
            "or a truncated file?)", file=m.path, field="expected_rows"))  # fmt: skip
    if m is not None and m.subset and report.subset_rows == 0 and not errors:
        raise InputError(f"no row matches the subset {m.subset}", file=m.path, field="subset")
    stale = unmatched_exclusions(report, rules.exclude) if rules.limit is None else []
    errors += [InputError(f"excluded id {rid!r} matches no row of the source (has the source changed?)",
                          file=m.path if m else None, field="exclude") for rid in stale]  # fmt: skip
    if report.source_rows == 0 and not errors:
        raise InputError("the dataset has no rows", file=prov.get("path_or_id"))
    errors.sort(key=lambda e: (e.file or "", e.row or 0))
    raise_errors(errors)
    if not got.records:
        raise InputError(f"no valid row: all {len(report.skipped)} rows were skipped as invalid",
                         file=prov.get("path_or_id"))  # fmt: skip
    prov.update(rows=len(got.records), total_rows=report.source_rows, limit=rules.limit,
                field_map=fmap.to_dict(), records_sha256=sha256_records(got.records),
                dedup=rules.dedup, rows_report=report.to_dict())  # fmt: skip
    prov.setdefault("sha256", prov["records_sha256"])
    return LoadedDataset(records=got.records, provenance=prov, manifest=manifest, locations=got.locations)


def _raise_missing(wanted: dict[str, str], columns: set[str], origin: str, errors=()) -> None:
    """One error per column the field map reads that the source lacks, not one per row."""
    missing = [c for c in wanted if c.split(".")[0] not in columns]
    if not missing:
        return
    listing = ", ".join(sorted(map(str, columns)))
    raise InputErrors([*(e for e in errors if e.row is None or e.field is None), *(
        InputError(f"column {c!r} (for {wanted[c]}) not found in any row (columns: {listing})", file=origin,
                   field=c) for c in missing)])  # fmt: skip


def _materialise(table: tables.Table) -> _Table:
    out = _Table([], [])
    for batch in table.read(None):
        for file, row_no, row in batch:
            if isinstance(row, InputError):
                out.errors.append(row)
            else:
                out.rows.append(row)
                out.locations.append((file, row_no))
    return out


def _field_map(spec: str | dict | None, base: FieldMap) -> FieldMap:
    try:
        return FieldMap.parse(spec, base=base)
    except ValueError as exc:
        raise UsageError(f"--field-map: {exc}") from None


def _classify(source: str) -> tuple[str, str, str | None]:
    """``(kind, target, note)`` with kind in manifest | file | dir | hf; ``note`` says which of a manifest
    and a same-named path in the working directory was taken."""
    if source.startswith("hf:"):
        return "hf", source, None
    path = Path(source).expanduser()
    suffix = path.suffix.lower()
    bare = "/" not in source and "\\" not in source and suffix not in (*TABLE_SUFFIXES, ".yaml", ".yml")
    if bare and path.exists() and source in list_manifests():
        return (
            "manifest",
            source,
            (
                f"manifest {source!r} ({list_manifests()[source]}), not the {'folder' if path.is_dir() else 'file'} "
                f"{path.resolve()} of the same name in the working directory (name it ./{source} to read that)"
            ),
        )
    if path.is_dir():
        return "dir", str(path), None
    if path.exists():
        if suffix in (".yaml", ".yml"):
            return "manifest", str(path), None
        if suffix in TABLE_SUFFIXES:
            return "file", str(path), None
        raise InputError(
            f"unsupported file type {suffix!r} (expected {', '.join(TABLE_SUFFIXES)})", file=path
        )
    if suffix in (*TABLE_SUFFIXES, ".yaml", ".yml"):
        raise InputError("file not found", file=path)
    if "/" not in source and "\\" not in source:
        return "manifest", source, None  # load_manifest lists the known ones when unknown
    if _HF_ID_RE.match(source.split("@")[0].split(":")[0]):
        return "hf", source, None
    known = ", ".join(list_manifests()) or "(none)"
    raise InputError(f"no such file, manifest or hub dataset id: {source!r}; known manifests: {known}")
