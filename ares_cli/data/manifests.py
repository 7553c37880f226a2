"""Dataset manifests: one YAML per dataset in ``data_manifests/`` (plus ``$ARES_MANIFESTS`` directories).

Schema (unknown keys are errors)::

    name: math500                   # must equal the file name without .yaml
    description: ...
    source:                         # exactly one of:
      hf: {id: org/name, split: test | [s1, s2], config: c | [c1, c2], revision: sha}  # concatenated
      local: {path: package:ares_cli/toy/data/train.jsonl, layout: records | keyed_object, key_column: id}
                                    # path: or relative to the manifest; layout: see ares_cli.data.tables
    field_map: {problem: question, answer: answer, id_from: index, ...}     # see ares_cli.data.fieldmap
    licence: MIT
    expected_rows: 500              # optional; a mismatch is an error
    source_label: math500           # the records' ``source`` (default: name)
    difficulty_field: level         # optional column copied to meta.difficulty
    grader: math                    # a registered name: math (default) | choice | boxed_int | entry point
    grading: {answer_forms: [boxed, answer_line], tolerance: 0.001}  # optional: the benchmark's grading
                                    # options (ares_cli.grading.options), applied by the grader above
    subset: {problem_version: Vision Only}   # optional: keep only rows whose columns equal these values
    aggregate: {kind: worst_case, group: qid}  # optional benchmark score (ares_cli.scoring.benchmark_scores)
    dedup: prompt                   # optional: drop rows whose prompt (text and images) an earlier row has
    exclude:                        # optional: rows of the source left out, each with the reason
      - {id: v1_382, reason: empty question and answer in the published file}

Comments in a manifest carry its evidence: where the real layout (columns, splits, row counts, answer
formats, images) was read, and what it says.

Lookup order: ``$ARES_MANIFESTS`` (os.pathsep-separated, first wins), then the repository's top-level
``data_manifests/`` (``Path(ares_cli.__file__).parents[1]``), then ``ares_cli/data_manifests/`` if installed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ares_cli
from ares_cli.data.fieldmap import FieldMap
from ares_cli.errors import InputError, InputErrors

ENV_VAR = "ARES_MANIFESTS"
PACKAGE_PREFIX = "package:"
_TOP_KEYS = {
    "name", "description", "source", "field_map", "licence", "license", "expected_rows", "source_label",
    "difficulty_field", "homepage", "citation", "notes", "grader", "subset", "aggregate", "grading", "dedup",
    "exclude",
}  # fmt: skip
DEDUP_KEYS = ("prompt",)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class HFSource:
    """A Hugging Face hub dataset (or anything ``datasets.load_dataset`` accepts as a path)."""

    id: str
    split: str
    configs: tuple[str | None, ...] = (None,)
    revision: str | None = None


@dataclass(frozen=True)
class LocalSource:
    """A local .jsonl/.json/.parquet file; ``path`` is resolved, ``spec`` is as written."""

    path: Path
    spec: str
    layout: str = "records"
    key_column: str = "id"


@dataclass(frozen=True)
class Manifest:
    """A parsed, validated dataset manifest."""

    name: str
    description: str
    source: HFSource | LocalSource
    field_map: FieldMap
    licence: str
    expected_rows: int | None
    source_label: str
    path: Path
    grader: str | None = None
    subset: dict[str, Any] | None = None
    aggregate: dict[str, Any] | None = None
    grading: dict[str, Any] | None = None  # validated grading options (ares_cli.grading.options)
    dedup: str | None = None
    exclude: dict[str, str] | None = None  # record id -> why it is left out

    def to_dict(self) -> dict[str, Any]:
        """Plain mapping for summaries and provenance."""
        src = self.source
        source = (
            {"hf": {"id": src.id, "split": src.split, "configs": list(src.configs), "revision": src.revision}}
            if isinstance(src, HFSource)
            else {
                "local": {
                    "path": str(src.path),
                    "spec": src.spec,
                    "layout": src.layout,
                    "key_column": src.key_column,
                }
            }
        )
        return {
            "name": self.name, "description": self.description, "source": source, "licence": self.licence,
            "field_map": self.field_map.to_dict(), "expected_rows": self.expected_rows,
            "source_label": self.source_label, "path": str(self.path), "grader": self.grader,
            "subset": self.subset, "aggregate": self.aggregate, "grading": self.grading, "dedup": self.dedup,
            "exclude": self.exclude,
        }  # fmt: skip


def package_root() -> Path:
    """The directory holding the ``ares_cli`` package (the repository root in a checkout)."""
    return Path(ares_cli.__file__).resolve().parents[1]


def manifest_dirs() -> list[Path]:
    """Directories searched for manifests, in precedence order (existing ones only)."""
    extra = [Path(p).expanduser() for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p.strip()]
    dirs = [
        *extra,
        package_root() / "data_manifests",
        Path(ares_cli.__file__).resolve().parent / "data_manifests",
    ]
    seen: list[Path] = []
    for d in dirs:
        if d.is_dir() and d.resolve() not in [s.resolve() for s in seen]:
            seen.append(d)
    return seen


def list_manifests() -> dict[str, Path]:
    """Known manifest names → files (the first directory wins on a name clash)."""
    found: dict[str, Path] = {}
    for d in manifest_dirs():
        for path in sorted([*d.glob("*.yaml"), *d.glob("*.yml")]):
            found.setdefault(path.stem, path)
    return dict(sorted(found.items()))


def find_manifest(name: str) -> Path:
    """The manifest file for ``name``; an unknown name is an InputError listing the known ones."""
    known = list_manifests()
    if name in known:
        return known[name]
    listing = ", ".join(known) or "(none)"
    dirs = ", ".join(str(d) for d in manifest_dirs()) or "(no manifest directory found)"
    raise InputError(f"unknown dataset manifest {name!r}; known manifests: {listing} (searched: {dirs})")


def load_manifest(name_or_path: str | Path) -> Manifest:
    """Load a manifest by name, or from a .yaml/.yml path."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return parse_manifest(p)
    return parse_manifest(find_manifest(str(name_or_path)))


def resolve_local_path(spec: str, manifest_path: Path) -> Path:
    """``package:rel`` → under :func:`package_root`; relative → the manifest's directory; ``~`` expanded."""
    if spec.startswith(PACKAGE_PREFIX):
        return package_root() / spec[len(PACKAGE_PREFIX) :].lstrip("/")
    p = Path(spec).expanduser()
    return p if p.is_absolute() else manifest_path.parent / p


def parse_manifest(path: str | Path) -> Manifest:
    """Parse and validate one manifest file; raises InputErrors naming the file and every bad field."""
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("manifest not found", file=path) from None
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text ({err.reason} at byte {err.start})", file=path) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", file=path) from None
    if not isinstance(doc, dict):
        raise InputError("a manifest must be a YAML mapping", file=path)
    errors: list[InputError] = []

    def err(field: str, message: str) -> None:
        errors.append(InputError(message, file=path, field=field))

    for key in doc:
        if key not in _TOP_KEYS:
            err(str(key), f"unknown key (allowed: {', '.join(sorted(_TOP_KEYS - {'license'}))})")
    name = _string(doc, "name", err)
    if name is not None and not _NAME_RE.match(name):
        err("name", f"{name!r} is not a valid name (letters, digits, '-', '_', '.')")
    elif name is not None and name != path.stem:
        err("name", f"{name!r} must equal the file name {path.stem!r}")
    description = _string(doc, "description", err)
    if "licence" in doc and "license" in doc:
        err("licence", "give 'licence' or 'license', not both")
    licence = _string(doc, "licence" if "licence" in doc or "license" not in doc else "license", err)
    expected = doc.get("expected_rows")
    if expected is not None and (isinstance(expected, bool) or not isinstance(expected, int) or expected < 0):
        err("expected_rows", f"must be a non-negative integer, got {expected!r}")
    label = doc.get("source_label", name)
    if label is not None and (not isinstance(label, str) or not label.strip()):
        err("source_label", "must be a non-empty string")
    source = _parse_source(doc.get("source"), path, err)
    fmap = FieldMap()
    try:
        fmap = FieldMap.parse(doc.get("field_map"))
    except ValueError as exc:
        err("field_map", str(exc))
    if doc.get("difficulty_field") is not None:
        try:
            fmap = FieldMap.parse({"difficulty": doc["difficulty_field"]}, base=fmap)
        except ValueError as exc:
            err("difficulty_field", str(exc))
    grader = doc.get("grader")
    if grader is not None:
        message = _grader_problem(grader)
        if message:
            err("grader", message)
    grading = doc.get("grading")
    if grading is not None:
        message = _grading_problem(grading, grader)
        if message:
            err("grading", message)
    subset = doc.get("subset")
    if subset is not None and (not isinstance(subset, dict) or not subset):
        err("subset", "must be a non-empty mapping of column: value")
    aggregate = doc.get("aggregate")
    if aggregate is not None:
        from ares_cli.scoring.benchmark_scores import check_spec

        try:
            check_spec(aggregate)
        except ValueError as exc:
            err("aggregate", str(exc))
    dedup = doc.get("dedup")
    if dedup is not None and dedup not in DEDUP_KEYS:
        err("dedup", f"must be one of {', '.join(DEDUP_KEYS)}, got {dedup!r}")
    exclude = _parse_exclude(doc.get("exclude"), err)
    if errors:
        raise InputErrors(errors)
    return Manifest(
        name=name, description=description, source=source, field_map=fmap, licence=licence,
        expected_rows=expected, source_label=label, path=path, grader=grader, subset=subset,
        aggregate=aggregate, grading=grading, dedup=dedup, exclude=exclude,
    )  # fmt: skip


def _parse_exclude(value: Any, err) -> dict[str, str] | None:
    """``exclude: [{id, reason}, ...]`` -> {id: reason}; every entry needs both, ids once."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        err("exclude", "must be a non-empty list of {id: ..., reason: ...}")
        return None
    out: dict[str, str] = {}
    for i, entry in enumerate(value):
        where = f"exclude[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"id", "reason"}:
            err(where, f"must be a mapping with exactly 'id' and 'reason', got {entry!r}")
            continue
        rid, reason = entry["id"], entry["reason"]
        if isinstance(rid, bool) or not isinstance(rid, (str, int)) or not str(rid).strip():
            err(f"{where}.id", f"must be a record id (string or integer), got {rid!r}")
        elif not isinstance(reason, str) or not reason.strip():
            err(f"{where}.reason", "must say why the row is left out")
        elif str(rid) in out:
            err(f"{where}.id", f"{rid!r} is listed twice")
        else:
            out[str(rid)] = reason.strip()
    return out


def _grader_problem(grader: Any) -> str | None:
    """Why ``grader`` cannot be a manifest's grader, or None. A manifest is data that people share: it
    names a registered grader (a built-in or an installed ``ares.graders`` entry point), never a module to
    import, since importing one runs its code. Nothing is imported here."""
    from ares_cli.grading.registry import ENTRY_POINT_GROUP, TRUST_FLAG, default_registry, is_registered

    names = ", ".join(default_registry().names())
    if not isinstance(grader, str) or not grader.strip():
        return f"must be a registered grader name ({names}), got {grader!r}"
    if is_registered(grader):
        return None
    return (
        f"{grader!r} is not a registered grader: a manifest may name only {names} or an installed "
        f"'{ENTRY_POINT_GROUP}' entry point, never a module path (it would run code); a custom grader is "
        f"given on the command line (--grader module:function {TRUST_FLAG})"
    )


def _grading_problem(grading: Any, grader: Any) -> str | None:
    """Why ``grading`` cannot be the grading options of a manifest whose grader is ``grader``, or None."""
    from ares_cli.errors import UsageError
    from ares_cli.grading.options import options_from_mapping
    from ares_cli.grading.registry import resolve_grader

    try:
        options = options_from_mapping(grading)
    except ValueError as exc:
        return str(exc)
    name = grader if isinstance(grader, str) and grader.strip() else "math_verify"
    if "[" in name:
        return f"give the grading options here or in grader {name!r}, not both"
    try:
        resolve_grader(name).with_options_of(options)
    except UsageError as exc:
        return str(exc)
    return None


def _string(doc: dict, key: str, err) -> str | None:
    value = doc.get(key)
    if value is None:
        err(key, "missing")
    elif not isinstance(value, str) or not value.strip():
        err(key, f"must be a non-empty string, got {value!r}")
    else:
        return value.strip()
    return None


def _parse_source(src: Any, path: Path, err) -> HFSource | LocalSource | None:
    if not isinstance(src, dict) or len(src) != 1 or next(iter(src)) not in ("hf", "local"):
        err("source", "must be a mapping with exactly one of 'hf' or 'local'")
        return None
    kind, body = next(iter(src.items()))
    if not isinstance(body, dict):
        err(f"source.{kind}", "must be a mapping")
        return None
    allowed = {"hf": {"id", "split", "config", "revision"}, "local": {"path", "layout", "key_column"}}[kind]
    for key in body:
        if key not in allowed:
            err(f"source.{kind}.{key}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
    if kind == "local":
        spec = body.get("path")
        if not isinstance(spec, str) or not spec.strip():
            err("source.local.path", "missing or not a string")
            return None
        resolved = resolve_local_path(spec, path)
        if resolved.suffix not in (".jsonl", ".json", ".parquet"):
            err("source.local.path", f"unsupported file type {resolved.suffix!r} (.jsonl, .json, .parquet)")
        from ares_cli.data.tables import LAYOUTS

        layout, key_column = body.get("layout", "records"), body.get("key_column", "id")
        if layout not in LAYOUTS:
            err("source.local.layout", f"must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        elif layout == "keyed_object" and resolved.suffix != ".json":
            err("source.local.layout", "keyed_object reads a .json file holding one object")
        if not isinstance(key_column, str) or not key_column.strip():
            err("source.local.key_column", f"must be a column name, got {key_column!r}")
        return LocalSource(path=resolved, spec=spec, layout=str(layout), key_column=str(key_column))
    bad = False
    split = body.get("split")
    if isinstance(split, list) and split and all(isinstance(x, str) and x.strip() for x in split):
        body = {**body, "split": "+".join(x.strip() for x in split)}  # splits are concatenated in order
    for key in ("id", "split"):
        if not isinstance(body.get(key), str) or not body[key].strip():
            err(f"source.hf.{key}", "missing or not a string")
            bad = True
    revision = body.get("revision")
    if revision is not None and not isinstance(revision, str):
        err("source.hf.revision", "must be a string (commit sha, tag or branch)")
        bad = True
    config = body.get("config")
    configs = config if isinstance(config, list) else [config]
    if not configs or not all(c is None or (isinstance(c, str) and c) for c in configs):
        err("source.hf.config", "must be a string or a non-empty list of strings")
        bad = True
    if bad:
        return None
    return HFSource(
        id=body["id"].strip(), split=body["split"].strip(), configs=tuple(configs), revision=revision
    )
