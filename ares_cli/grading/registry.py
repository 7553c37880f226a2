"""Grader registry: built-ins by name, custom graders as ``module:function`` import paths.

Every grader is identified by an import path so spawned worker processes can load it themselves.
A custom grader has the signature ``fn(gold: str, response: str) -> bool | grade string``.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ares_cli import __version__
from ares_cli.errors import UsageError
from ares_cli.grading.graders import math_verify_version
from ares_cli.grading.math_grader import RULES_VERSION

__all__ = [
    "GraderFn", "GraderSpec", "load_target", "builtin_specs", "ALIASES", "GraderRegistry",
    "default_registry", "resolve_grader"
]  # fmt: skip

GraderFn = Callable[[str, str], object]


@dataclass(frozen=True)
class GraderSpec:
    """A resolved grader.

    ``extract``: True for graders that receive the extracted boxed answer (a missing one is graded
    ``invalid`` without calling them); False for graders that receive the full response text.
    ``preload``: modules a worker imports before it reports ready, so a slow first import (sympy) is not
    charged to the first sample's timeout; ``warmup``: (gold, input) calls made for the same reason (lazy
    parser set-up) before a worker reports ready. ``extractor``: a ``module:function`` run in the parent as
    ``fn(gold, response) -> answer | None`` instead of the boxed-answer extraction (the choice grader reads
    the final option letter). ``with_options``: the gold handed over carries the record's ``meta.options``.
    """

    name: str
    target: str
    version: str
    extract: bool = False
    preload: tuple[str, ...] = ()
    warmup: tuple[tuple[str, str], ...] = ()
    extractor: str | None = None
    with_options: bool = False

    @property
    def label(self) -> str:
        """Provenance string stored with every grade, e.g. ``math_verify==0.9.0``."""
        return f"{self.name}=={self.version}"


def load_target(target: str) -> GraderFn:
    """Import ``module:function`` (dotted attributes allowed after the colon); raise UsageError if missing."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"grader {target!r} is not of the form 'module:function'")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"grader {target!r}: cannot import module {module_name!r} ({e})") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"grader {target!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"grader {target!r} is not callable")
    _check_grader(target, module_name, obj)
    return obj  # type: ignore[return-value]


def _check_grader(target: str, module_name: str, fn: object) -> None:
    """Refuse what cannot be a grader: standard-library callables (``os:system`` would grade every sample
    ``error``, or worse, run it) and functions that cannot be called as ``fn(gold, response)``."""
    import sys

    if module_name.split(".")[0] in sys.stdlib_module_names:
        raise UsageError(f"grader {target!r}: {module_name!r} is a standard-library module, not a grader")
    try:
        signature = inspect.signature(fn)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # some C callables have none: let the workers find out
        return
    try:
        signature.bind("gold", "response")
    except TypeError:
        raise UsageError(f"grader {target!r} cannot be called as fn(gold, response): {signature}") from None


def _source_version(fn: GraderFn) -> str:
    """Code version of a custom grader: a short hash of its source (or 'unknown' without source)."""
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return "unknown"
    return "src-" + hashlib.sha256(src.encode()).hexdigest()[:10]


def _target_of(fn: GraderFn) -> str:
    target = f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', '')}"
    if "<" in target or target.startswith(":") or load_target(target) is not fn:
        raise UsageError(
            f"grader {fn!r} must be a module-level function (worker processes import it by name)"
        )
    return target


def builtin_specs() -> list[GraderSpec]:
    """The built-in graders: ``math_verify`` (alias ``math``: math-verify with the project's rules,
    :mod:`ares_cli.grading.math_grader`), ``boxed_int`` and ``choice``."""
    return [
        GraderSpec(
            "math_verify",
            "ares_cli.grading.math_grader:math_grade",
            f"{math_verify_version()}+{RULES_VERSION}",
            extract=True,
            preload=("math_verify",),
            warmup=(("1", "1"), (r"\frac{1}{2}", "0.5"), ("[1,2)", "[1, 2)"), ("x+1", "1+x")),
        ),
        GraderSpec("boxed_int", "ares_cli.grading.graders:boxed_int_grade", f"ares-{__version__}", True),
        GraderSpec(
            "choice",
            "ares_cli.grading.choice:choice_grade",
            f"ares-{__version__}",
            extract=True,
            extractor="ares_cli.grading.choice:extract_for_gold",
            with_options=True,
        ),
    ]


ALIASES = {"math": "math_verify"}
JUDGE_NAME = re.compile(r"^(?:(?P<rules>[A-Za-z_][\w.]*)\+)?judge(?::(?P<model>.+))?$")  # grading.judge


class GraderRegistry:
    """Graders by name. A duplicate name is an error; an unknown name lists the valid ones."""

    def __init__(self, specs: Iterable[GraderSpec] = ()):
        self._specs: dict[str, GraderSpec] = {}
        for spec in specs:
            self._add(spec)

    def _add(self, spec: GraderSpec) -> GraderSpec:
        if spec.name in self._specs:
            raise UsageError(f"grader {spec.name!r} is already registered ({self._specs[spec.name].target})")
        self._specs[spec.name] = spec
        return spec

    def register(
        self, name: str, grader: str | GraderFn, *, version: str | None = None, extract: bool = False
    ) -> GraderSpec:
        """Register ``grader`` (a ``module:function`` string or a module-level function) under ``name``."""
        if isinstance(grader, str):
            fn, target = load_target(grader), grader
        else:
            fn, target = grader, _target_of(grader)
        return self._add(GraderSpec(name, target, version or _source_version(fn), extract))

    def names(self) -> list[str]:
        return sorted(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def resolve(self, grader: str | GraderSpec) -> GraderSpec:
        """A registered name, a ``module:function`` import path, or an already resolved spec."""
        if isinstance(grader, GraderSpec):
            return grader
        grader = ALIASES.get(grader, grader)
        if grader in self._specs:
            return self._specs[grader]
        if JUDGE_NAME.match(grader):
            raise UsageError(
                f"grader {grader!r} asks a judge model: it grades in ares eval and ares passrate "
                "(ares_cli.grading.judged), not in grading workers"
            )
        if ":" in grader:
            return GraderSpec(grader, grader, _source_version(load_target(grader)), extract=False)
        valid = ", ".join(self.names())
        raise UsageError(
            f"unknown grader {grader!r}; valid graders: {valid}, judge, judge:MODEL, RULES+judge "
            "(or a custom 'module:function')"
        )


def default_registry() -> GraderRegistry:
    """A fresh registry holding the built-in graders."""
    return GraderRegistry(builtin_specs())


def resolve_grader(grader: str | GraderSpec, registry: GraderRegistry | None = None) -> GraderSpec:
    """Resolve a grader name/path against ``registry`` (default: the built-ins)."""
    return (registry or default_registry()).resolve(grader)
