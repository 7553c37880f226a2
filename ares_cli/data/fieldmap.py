"""Field maps: how the columns of a source become Problem record fields.

A field map names, per record field, the source column it comes from (``problem: question``), plus rules:
``id_from`` (a column, or ``index`` → ``<name>-<row index>``, 0-based), ``answer_after`` (gold is the text
after the last separator, e.g. GSM8K's ``####``), ``answer_regex`` (first group, else the whole match),
``meta`` (meta key ← column) and ``difficulty`` (column → ``meta.difficulty``). A ``meta`` column holding an
object is kept as the base of ``meta``. Multiple-choice sources: ``options`` (a column holding the option
list, or a list of columns holding one option each) → ``meta.options``, appended to the problem as
``(A) ...`` lines; ``shuffle_options`` (true) orders them by a permutation seeded by the record id (GPQA
stores the correct option first); ``append_options`` (false: the problem text already lists them, as
MathVista's ``query`` does; they are kept in ``meta.options`` only); ``options_text`` (a column of already
formatted options, appended as is). Images: ``images`` names one column (a path, a list of paths, or an
image value) or a list of columns read in order, empty ones skipped (MMMU's ``image_1`` .. ``image_7``, in
the order the ``<image N>`` tags number them); ``image_dir`` is the folder, relative to the data file,
that relative image paths start from (LogicVista's ``images/``). Written as a YAML mapping in manifests,
or on the command line as ``problem=question,answer=solution,id=index,meta.level=level``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Any

INDEX = "index"
_KEYS = (
    "problem",
    "answer",
    "id_from",
    "source",
    "images",
    "answer_after",
    "answer_regex",
    "difficulty",
    "meta",
    "options",
    "options_text",
    "shuffle_options",
    "append_options",
    "image_dir",
)
_FLAGS = ("shuffle_options", "append_options")
DEFAULT_IMAGES = "images"
_ALIASES = {"id": "id_from"}


@dataclass(frozen=True)
class FieldMap:
    """Record field ← source column, with the extraction rules above (defaults: identity)."""

    problem: str = "problem"
    answer: str = "answer"
    id_from: str = "id"
    source: str = "source"
    images: str | tuple[str, ...] = DEFAULT_IMAGES
    answer_after: str | None = None
    answer_regex: str | None = None
    difficulty: str | None = None
    meta: dict[str, str] = field(default_factory=dict)
    options: tuple[str, ...] | str | None = None
    options_text: str | None = None
    shuffle_options: bool = False
    append_options: bool = True
    image_dir: str | None = None

    @classmethod
    def parse(cls, spec: dict | str | None, *, base: FieldMap | None = None) -> FieldMap:
        """Build from a mapping or a ``k=v,k=v`` string over ``base``; raises ValueError naming the key."""
        base = base or cls()
        if spec is None:
            return base
        if isinstance(spec, str):
            spec = _parse_string(spec)
        if not isinstance(spec, dict):
            raise ValueError(f"field map must be a mapping, got {type(spec).__name__}")
        updates: dict[str, Any] = {}
        meta = dict(base.meta)
        for raw_key, value in spec.items():
            key = _ALIASES.get(str(raw_key), str(raw_key))
            if key.startswith("meta."):
                meta[key[5:]] = _column(raw_key, value)
            elif key == "meta":
                if isinstance(value, list):
                    meta.update({_column(raw_key, v): _column(raw_key, v) for v in value})
                elif isinstance(value, dict):
                    meta.update({str(k): _column(f"meta.{k}", v) for k, v in value.items()})
                else:
                    raise ValueError("meta: must be a mapping (meta key: column) or a list of columns")
            elif key not in _KEYS:
                raise ValueError(f"{raw_key}: unknown field map key (allowed: id, {', '.join(_KEYS)})")
            elif key in _FLAGS:
                if isinstance(value, str) and value.lower() in ("true", "false"):  # k=v on the command line
                    value = value.lower() == "true"
                if not isinstance(value, bool):
                    raise ValueError(f"{key}: expected true or false, got {value!r}")
                updates[key] = value
            elif key in ("options", "images") and isinstance(value, (list, tuple)):
                if not value:
                    raise ValueError(f"{key}: expected a column or a non-empty list of columns")
                updates[key] = tuple(_column(raw_key, v) for v in value)
            elif key == "image_dir":
                updates[key] = _relative_dir(_column(raw_key, value))
            else:
                updates[key] = _column(raw_key, value)
        if updates.get("answer_regex") is not None:
            try:
                re.compile(updates["answer_regex"])
            except re.error as exc:
                raise ValueError(f"answer_regex: invalid regular expression ({exc})") from None
        return replace(base, meta=meta, **updates)

    def required_columns(self) -> dict[str, str]:
        """Columns that must exist in the source → the record field each one feeds."""
        cols = {self.problem: "problem", self.answer: "answer"}
        cols.update({col: f"meta.{key}" for key, col in self.meta.items()})
        if self.id_from != INDEX:
            cols.setdefault(self.id_from, "id")
        if self.difficulty:
            cols.setdefault(self.difficulty, "meta.difficulty")
        for col in (self.options,) if isinstance(self.options, str) else self.options or ():
            cols.setdefault(col, "meta.options")
        if self.options_text:
            cols.setdefault(self.options_text, "problem")
        for col in self.image_columns() if self.images != DEFAULT_IMAGES else ():
            cols.setdefault(col, "images")  # a named image column that is absent would load text-only
        return cols

    def image_columns(self) -> tuple[str, ...]:
        """The columns images are read from, in order."""
        return (self.images,) if isinstance(self.images, str) else self.images

    def read_columns(self) -> set[str]:
        """Top-level source columns this map reads (the rest of a table need not be read at all)."""
        named = self.required_columns()
        cols = set(named) | {c.split(".")[0] for c in named}  # a dotted path, or a column named with a dot
        return cols | {self.source, "meta", "image", *self.image_columns()}

    def to_dict(self) -> dict[str, Any]:
        """Plain mapping (for provenance and config hashing)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def apply(
        self, row: dict, index: int, *, name: str, label: str | None, default_label: str
    ) -> tuple[dict, dict[str, str]]:
        """Map one source row: ``(record, {field: mapping error})``; record values are validated later.

        ``label`` (a manifest's source label) overrides the row's source column; ``default_label`` fills in
        when neither is present.
        """
        errors: dict[str, str] = {}
        rid = f"{name}-{index}" if self.id_from == INDEX else lookup(row, self.id_from)
        record: dict[str, Any] = {
            "id": rid,
            "source": label or row.get(self.source) or default_label,
            "problem": lookup(row, self.problem),
        }
        answer = lookup(row, self.answer)
        if answer is not None and (self.answer_after or self.answer_regex):
            answer, problem = self._extract(str(answer))
            if problem:
                errors["answer"] = problem
        record["answer"] = answer
        images = self.images_of(row)
        if images is not None:
            record["images"] = images
        meta = dict(row["meta"]) if isinstance(row.get("meta"), dict) else {}
        meta.update({key: lookup(row, col) for key, col in self.meta.items()})
        if self.difficulty:
            meta["difficulty"] = lookup(row, self.difficulty)
        if self.options is not None:
            options, problem = self._options(row, rid)
            if problem:
                errors["meta.options"] = problem
            elif options:
                meta["options"] = options
                if self.append_options:
                    record["problem"] = _with_options(record["problem"], options)
        if self.options_text and lookup(row, self.options_text) is not None:
            record["problem"] = f"{record['problem']}\n{lookup(row, self.options_text)}"
        if meta:
            record["meta"] = meta
        return record, errors

    def images_of(self, row: dict) -> Any:
        """The row's image values (a list, in column order; None when it has none)."""
        if isinstance(self.images, str):
            value = row.get(self.images)
            return list(value) if isinstance(value, tuple) else [value] if isinstance(value, str) else value
        found: list = []
        for col in self.images:  # several columns, in order; empty ones skipped
            value = row.get(col)
            if isinstance(value, (list, tuple)):
                found.extend(value)
            elif value is not None:
                found.append(value)
        return found or None

    def _options(self, row: dict, rid: Any) -> tuple[list[str], str | None]:
        if isinstance(self.options, str):
            value = lookup(row, self.options)
            if isinstance(value, str):
                import ast

                try:
                    value = ast.literal_eval(value)
                except (ValueError, SyntaxError):
                    return [], f"column {self.options!r} holds no option list ({_clip(value)!r})"
            if value is None or (isinstance(value, (list, tuple)) and not value):
                return [], None  # a free-form question of a mixed benchmark (MathVision, MMMU)
            if not isinstance(value, (list, tuple)):
                return [], f"column {self.options!r} must hold a list of options, got {_clip(str(value))!r}"
            options = [str(v) for v in value]
        else:
            values = [lookup(row, col) for col in self.options or ()]
            missing = [col for col, v in zip(self.options or (), values, strict=True) if v is None]
            if missing:
                return [], f"option column(s) {', '.join(missing)} empty"
            options = [str(v).strip() for v in values]
        if len(options) > 26:  # they are lettered (A) to (Z)
            return [], f"{len(options)} options: at most 26 can be lettered (A) to (Z)"
        if self.shuffle_options:
            options = shuffled(options, str(rid))
        return options, None

    def _extract(self, text: str) -> tuple[str | None, str | None]:
        if self.answer_after:
            at = text.rfind(self.answer_after)
            if at < 0:
                return None, f"no {self.answer_after!r} separator in the answer column {self.answer!r}"
            text = text[at + len(self.answer_after) :].strip()
        if self.answer_regex:
            match = re.search(self.answer_regex, text)
            if not match:
                return None, f"answer_regex {self.answer_regex!r} does not match {_clip(text)!r}"
            text = (match.group(1) if match.re.groups else match.group(0)).strip()
        return text, None


def lookup(row: dict, column: str) -> Any:
    """``row[column]``, or a dotted path into nested columns (``reward_model.ground_truth``,
    ``prompt.0.content`` with list indices) when no column has that exact name."""
    if column in row or "." not in column:
        return row.get(column)
    value: Any = row
    for part in column.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, (list, tuple)) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def shuffled(options: list[str], key: str) -> list[str]:
    """``options`` in a fixed pseudo-random order seeded by ``key`` (sha256), the same on every machine."""
    import hashlib
    import random

    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    order = list(range(len(options)))
    random.Random(seed).shuffle(order)
    return [options[i] for i in order]


def _with_options(problem: Any, options: list[str]) -> Any:
    """The problem text followed by its options as ``(A) text`` lines."""
    if not isinstance(problem, str):
        return problem
    lines = [f"({chr(ord('A') + i)}) {opt}" for i, opt in enumerate(options)]
    return problem.rstrip() + "\n\n" + "\n".join(lines)


def _parse_string(spec: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{part!r}: expected key=column")
        out[key.strip()] = value.strip()
    return out


def _column(key: Any, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key}: expected a non-empty column name or string, got {value!r}")
    return value


def _relative_dir(value: str) -> str:
    """``image_dir`` must stay inside the dataset's folder: relative, no ``..`` (data never escapes its root)."""
    from pathlib import PurePosixPath

    parts = PurePosixPath(value.replace("\\", "/")).parts
    if value.startswith(("/", "~")) or ".." in parts:
        raise ValueError(f"image_dir: {value!r} must be a folder inside the dataset's directory")
    return value


def _clip(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
