"""Typed stage configs with one precedence rule: dataclass defaults < YAML (``--config``) < ``--set`` / flags.

Every field carries its paper default and a one-line ``help`` in ``field(metadata=...)``, and a numeric
field may declare its valid range (``option(8, "...", ge=1, le=4096)``). Unknown keys are rejected with the
list of valid ones; nested dataclasses are addressed with dotted keys (``aepo.window=4``). A resolved config
is checked once, before any stage does work: every float is finite, every bounded field lies in its range,
a field with ``choices`` (a registry of names, or a tuple) holds one of them, and a dataclass may add
cross-field rules in a ``check(self)`` method (each failure is a UsageError, exit 2).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from ares_cli.errors import UsageError

T = TypeVar("T")

# Words a bool field accepts; a YAML bool given to a Literal field maps back to its one word among these.
_BOOL_WORDS: dict[bool, tuple[str, ...]] = {
    True: ("true", "1", "yes", "on"),
    False: ("false", "0", "no", "off"),
}
# --set values kept as strings (YAML 1.1 would read them as bools): `--set filter.mode=off` stays "off".
_WORDS_NOT_BOOLS = ("on", "off", "yes", "no")


_BOUNDS = ("ge", "gt", "le", "lt")
# Every seed of every stage: what random, numpy and torch all accept (numpy refuses >= 2**32, torch < 0).
SEED_RANGE = {"ge": 0, "le": 2**32 - 1}
_BOUND_TEXT = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


def option(
    default: Any,
    help: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: Any = None,
    **kwargs: Any,
) -> Any:
    """A dataclass field with a default, a one-line description and an optional valid range or set of names.

    ``ge``/``gt``/``le``/``lt`` bound a numeric field (None values are exempt: they mean "unset");
    ``choices`` is what the value must be one of: a tuple, or a registry (anything with ``names()`` and a
    ``kind``), read when the config is checked, so names registered later count. :func:`check` enforces
    both when a config is resolved, and :func:`describe` lists the choices in the field's help.
    """
    bounds = {name: v for name, v in zip(_BOUNDS, (ge, gt, le, lt), strict=True) if v is not None}
    if bounds:
        kwargs["bounds"] = bounds
    if choices is not None:
        kwargs["choices"] = choices
    if isinstance(default, (list, dict, set)) or dataclasses.is_dataclass(default):
        factory = (lambda d=default: type(d)(d)) if not dataclasses.is_dataclass(default) else type(default)
        return dataclasses.field(default_factory=factory, metadata={"help": help, **kwargs})
    return dataclasses.field(default=default, metadata={"help": help, **kwargs})


def seed_option(default: int, help: str) -> Any:
    """A seed field: an integer in :data:`SEED_RANGE` (the same range for every seed of every stage)."""
    return option(default, help, **SEED_RANGE)


def check_seed(value: int, key: str = "seed") -> int:
    """``value`` if it lies in :data:`SEED_RANGE`, else the UsageError a config field's range gives."""
    if isinstance(value, bool) or not isinstance(value, int) or _out_of_range(value, SEED_RANGE):
        raise UsageError(f"config key '{key}': {value!r} is out of range (must be {range_text(SEED_RANGE)})")
    return value


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """Convert a YAML/CLI value to the annotated type, or raise a UsageError naming the key."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, key)
            except UsageError:
                continue
        raise UsageError(f"config key '{key}': {value!r} is not a valid {annotation}")
    if origin is typing.Literal:
        if isinstance(value, bool) and value not in args:  # a YAML 1.1 file reads a bare `off` as false
            spelled = [a for a in args if isinstance(a, str) and a.lower() in _BOOL_WORDS[value]]
            value = spelled[0] if len(spelled) == 1 else value
        if value not in args:
            raise UsageError(f"config key '{key}': {value!r} is not one of {', '.join(map(str, args))}")
        return value
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise UsageError(f"config key '{key}': expected a list, got {value!r}")
        inner = args[0] if args else Any
        items = [_coerce(v, inner, key) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise UsageError(f"config key '{key}': expected a mapping, got {value!r}")
        return dict(value)
    if annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _BOOL_WORDS[True] + _BOOL_WORDS[False]:
            return value.lower() in _BOOL_WORDS[True]
        raise UsageError(f"config key '{key}': expected true/false, got {value!r}")
    if annotation is int:
        if isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, str) and _is_int(value))
        ):
            raise UsageError(f"config key '{key}': expected an integer, got {value!r}")
        return int(value)
    if annotation is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise UsageError(f"config key '{key}': expected a number, got {value!r}") from None
    if annotation is str:
        if isinstance(value, (dict, list)):
            raise UsageError(f"config key '{key}': expected a string, got {value!r}")
        return str(value)
    return value


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _apply(obj: Any, updates: dict[str, Any], prefix: str = "") -> Any:
    """Return a copy of dataclass ``obj`` with nested ``updates`` applied (unknown keys rejected)."""
    hints = _field_types(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    changes = {}
    for name, value in updates.items():
        key = f"{prefix}{name}"
        if name not in names:
            valid = ", ".join(sorted(f"{prefix}{n}" for n in names))
            raise UsageError(f"unknown config key '{key}'; valid keys: {valid}")
        current = getattr(obj, name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise UsageError(f"config key '{key}' is a section; set its fields as {key}.<field>")
            changes[name] = _apply(current, value, prefix=f"{key}.")
        else:
            changes[name] = _coerce(value, hints[name], key)
    try:
        return dataclasses.replace(obj, **changes)
    except UsageError as err:  # a section that validates itself on construction names its own keys
        raise UsageError(str(err).replace("config key '", f"config key '{prefix}", 1)) from None


def parse_sets(pairs: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` → nested dict, values parsed as YAML scalars.

    ``on/off/yes/no`` (any case) stay strings, not YAML 1.1 bools: ``filter.mode=off`` is the string "off",
    and a bool field still accepts them (:func:`_coerce`: on/yes → True, off/no → False).
    """
    import yaml

    nested: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"--set expects key=value, got '{pair}'")
        key, raw = pair.split("=", 1)
        if raw.strip().lower() in _WORDS_NOT_BOOLS:
            value = raw.strip()
        else:
            try:
                value = yaml.safe_load(raw) if raw else ""
            except yaml.YAMLError:
                value = raw
        node = nested
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def load_yaml(path: Path | str | None, *, section: str | None = None) -> dict[str, Any]:
    """Read a YAML config (optionally one top-level section of a pipeline file)."""
    if path is None:
        return {}
    import yaml

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"config file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: config is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: invalid YAML ({err})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping at the top level")
    if section is not None and section in data and isinstance(data[section], dict):
        data = data[section]
    return data


def resolve(
    cls: type[T],
    *,
    yaml_path: Path | str | None = None,
    sets: list[str] | None = None,
    flags: dict[str, Any] | None = None,
    section: str | None = None,
    base: dict[str, Any] | None = None,
    base_file: str | Path | None = None,
) -> T:
    """Build a config: defaults < ``base`` (an eval suite's settings, read from ``base_file``) < YAML <
    ``--set`` < explicit flags (flags whose value is None are unset)."""
    refuse_command_line_only(cls, base or {}, str(base_file or "an evaluation suite"))
    config = _apply_from(cls(), base or {}, base_file)
    from_file = load_yaml(yaml_path, section=section)
    refuse_command_line_only(cls, from_file, str(yaml_path))
    config = _apply_from(config, from_file, yaml_path)
    config = _apply(config, parse_sets(sets or []))
    explicit = {k: v for k, v in (flags or {}).items() if v is not None}
    config = _apply(config, parse_sets([]) | _nest(explicit))
    check(config)
    return config


def _apply_from(config: T, values: dict[str, Any], file: str | Path | None) -> T:
    """:func:`_apply` for values read from ``file``: a bad key or value names the file it is in."""
    try:
        return _apply(config, values)
    except UsageError as err:
        raise (UsageError(f"{file}: {err}") if file is not None else err) from None


def refuse_command_line_only(cls: type, values: dict[str, Any], where: str, prefix: str = "") -> None:
    """A field marked ``command_line_only`` (an opt-in to run code, like ``trust_grader_code``) given in a
    file (a ``--config`` YAML, a pipeline's stage config, a suite) is a UsageError: files are shared, and
    only the person running the command may grant it."""
    instance = cls()
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, value in values.items():
        f = fields.get(name)
        if f is None:
            continue  # unknown keys are reported when the values are applied
        current = getattr(instance, name)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            refuse_command_line_only(type(current), value, where, prefix=f"{prefix}{name}.")
        elif f.metadata.get("command_line_only"):
            raise UsageError(
                f"config key '{prefix}{name}' is set in {where}: it can be given only on the command line "
                f"({f.metadata['command_line_only']}), never by a file"
            )


def range_text(bounds: dict[str, float]) -> str:
    """``{"ge": 1, "le": 8}`` → ``>= 1, <= 8``."""

    def number(value: float) -> str:
        return str(value) if isinstance(value, int) else f"{value:g}"

    return ", ".join(f"{_BOUND_TEXT[name]} {number(bounds[name])}" for name in _BOUNDS if name in bounds)


def _out_of_range(value: float, bounds: dict[str, float]) -> bool:
    return (
        ("ge" in bounds and not value >= bounds["ge"])
        or ("gt" in bounds and not value > bounds["gt"])
        or ("le" in bounds and not value <= bounds["le"])
        or ("lt" in bounds and not value < bounds["lt"])
    )


def choice_names(choices: Any) -> list[str]:
    """The names a ``choices`` declaration allows (a registry's, in its order, or the tuple itself)."""
    return list(choices.names()) if hasattr(choices, "names") else [str(c) for c in choices]


def check_choice(value: Any, choices: Any, key: str) -> None:
    """``value`` is one of ``choices`` (None means unset), else a UsageError naming the key and every choice."""
    names = choice_names(choices)
    if value is None or value in names:
        return
    kind = getattr(choices, "kind", "value")
    raise UsageError(
        f"config key '{key}': unknown {kind} {value!r}; valid: {', '.join(names)}{did_you_mean(value, names)}"
    )


def did_you_mean(value: Any, names: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the name in ``names`` nearest to ``value``, or ``""``."""
    match = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def check(config: Any, prefix: str = "") -> None:
    """Validate a config tree: finite floats, declared ranges and choices, then each section's ``check()``.

    Raises a UsageError (exit 2) naming the dotted key, its value and what it may be.
    """
    for f in dataclasses.fields(config):
        value, key = getattr(config, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            check(value, prefix=f"{key}.")
            continue
        if f.metadata.get("choices") is not None:
            check_choice(value, f.metadata["choices"], key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"config key '{key}': {value} is not a finite number")
        bounds = f.metadata.get("bounds")
        if bounds and _out_of_range(value, bounds):
            raise UsageError(f"config key '{key}': {value!r} is out of range (must be {range_text(bounds)})")
    rules = getattr(config, "check", None)
    if callable(rules):
        rules()


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def to_dict(config: Any) -> dict[str, Any]:
    """Plain-JSON form of a config (Paths as strings, tuples as lists)."""
    return _jsonable(dataclasses.asdict(config))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def describe(cls: type) -> list[tuple[str, Any, str]]:
    """(dotted key, default, help) for every field, recursively: the reference table for docs and --help.

    A bounded field's help ends with its valid range, e.g. ``Samples per problem. Range: >= 1, <= 4096.``,
    a field with choices with the names registered when it is described (``One of: a, b.``).
    """
    rows = []
    for f in dataclasses.fields(cls):
        default = cls().__getattribute__(f.name)
        if dataclasses.is_dataclass(default):
            rows.extend((f"{f.name}.{k}", d, h) for k, d, h in describe(type(default)))
        else:
            help_text = f.metadata.get("help", "")
            if f.metadata.get("bounds"):
                help_text = f"{help_text} Range: {range_text(f.metadata['bounds'])}."
            if f.metadata.get("choices") is not None:
                help_text = f"{help_text} One of: {', '.join(choice_names(f.metadata['choices']))}."
            rows.append((f.name, default, help_text))
    return rows
