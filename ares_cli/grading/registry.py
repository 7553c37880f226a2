"""Grader registry: built-ins by name, installed ``ares.graders`` entry points by name, and custom graders
as ``module:function`` import paths, which only the user's explicit opt-in (``--trust-grader-code``) allows.

Every grader is identified by an import path so spawned worker processes can load it themselves; the path
is checked against the object it reaches (:func:`load_target`), not as a string. Data (a dataset manifest,
a stored artifact, a shared pipeline) may name graders only by name (:func:`is_registered`): naming a
module would run its code. A custom grader has the signature ``fn(gold: str, response: str) -> bool |
grade string``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ares_cli import __version__
from ares_cli.errors import UsageError
from ares_cli.grading.graders import math_verify_version
from ares_cli.grading.math_grader import RULES_VERSION

__all__ = [
    "GraderFn", "GraderSpec", "load_target", "builtin_specs", "ALIASES", "GraderRegistry",
    "default_registry", "resolve_grader", "is_registered", "installed_graders", "ENTRY_POINT_GROUP",
    "TRUST_FLAG"
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
    ``accepts``: the grading options (:mod:`ares_cli.grading.options`) the grader can apply;
    ``options``: the canonical ``[key=value,...]`` of the options it was resolved with ("" for none),
    also carried by ``target`` and ``extractor`` so that the workers apply them.
    """

    name: str
    target: str
    version: str
    extract: bool = False
    preload: tuple[str, ...] = ()
    warmup: tuple[tuple[str, str], ...] = ()
    extractor: str | None = None
    with_options: bool = False
    accepts: tuple[str, ...] = ()
    options: str = ""

    @property
    def label(self) -> str:
        """Provenance string stored with every grade, e.g. ``math_verify==0.9.0`` (with options:
        ``math_verify[tolerance=0.001]==0.9.0``)."""
        return f"{self.name}{self.options}=={self.version}"

    def retarget(self, name: str, target: str) -> GraderSpec:
        """This grader under another name and function (the same options, applied to that function)."""
        return replace(self, name=name, target=target + self.options)

    def grading_options(self):
        """The :class:`~ares_cli.grading.options.GradingOptions` this grader was resolved with (or None)."""
        from ares_cli.grading.options import options_from_suffix

        return options_from_suffix(self.options[1:-1]) if self.options else None

    def with_options_of(self, options) -> GraderSpec:
        """This grader resolved with ``options`` (a :class:`~ares_cli.grading.options.GradingOptions`);
        UsageError for an option it does not accept."""
        given = options.given()
        refused = sorted(set(given) - set(self.accepts))
        if refused:
            takes = ", ".join(self.accepts) or "none"
            raise UsageError(f"grader {self.name!r} takes no option {refused[0]!r} (its options: {takes})")
        suffix = options.suffix()
        if not suffix:
            return self
        return replace(
            self,
            target=self.target + suffix,
            extractor=self.extractor + suffix if self.extractor else None,
            options=suffix,
        )


def split_target(target: str) -> tuple[str, str]:
    """``"pkg.mod:fn"`` → ("pkg.mod", "fn"): dotted identifiers on both sides, else a UsageError."""
    module_name, sep, attr = target.partition(":")
    if not sep or not _dotted_identifier(module_name) or not _dotted_identifier(attr):
        raise UsageError(f"grader {target!r} is not of the form 'module:function'")
    return module_name, attr


def _dotted_identifier(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def load_target(target: str) -> GraderFn:
    """Import ``module:function`` and return the function, checked as the object that will be called;
    ``module:function[options]`` (a resolved grader with options) returns it with the grading options
    bound to its ``options`` parameter.

    The object must be a Python function defined in the named module under the named path (its
    ``__module__`` and ``__qualname__``), so an attribute path cannot walk out of the module it names
    (``rich:os.execlp`` reaches ``os.execlp``, defined in ``os``: refused); standard-library modules
    and functions that cannot be called as ``fn(gold, response)`` are refused too (UsageError).
    Importing runs the module's code: callers decide first whether the path is trusted
    (:meth:`GraderRegistry.resolve`).
    """
    if target.endswith("]") and "[" in target:
        return _with_options(target)
    module_name, attr = split_target(target)
    if module_name.split(".")[0] in sys.stdlib_module_names:
        raise UsageError(f"grader {target!r}: {module_name!r} is a standard-library module, not a grader")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"grader {target!r}: cannot import module {module_name!r} ({e})") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"grader {target!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    _check_grader(target, module_name, attr, obj)
    return obj  # type: ignore[return-value]


def _with_options(target: str) -> GraderFn:
    from ares_cli.grading.options import split_ref

    try:
        base, options = split_ref(target)
    except ValueError as e:
        raise UsageError(str(e)) from None
    fn = load_target(base)
    if "options" not in inspect.signature(fn).parameters:
        raise UsageError(f"grader {base!r} takes no grading options")
    return functools.partial(fn, options=options)


def _check_grader(target: str, module_name: str, attr: str, fn: object) -> None:
    """Refuse an object that is not a function defined at ``module_name:attr``, or that cannot be
    called as ``fn(gold, response)``."""
    if not inspect.isfunction(fn):
        kind = "not callable" if not callable(fn) else f"a {type(fn).__name__}, not a Python function"
        raise UsageError(f"grader {target!r} is {kind}")
    where = f"{fn.__module__}.{fn.__qualname__}"
    if fn.__module__ != module_name or fn.__qualname__ != attr:
        raise UsageError(
            f"grader {target!r} reaches {where}, which is not defined in {module_name!r}: a grader path "
            "must name a function where it is defined"
        )
    try:
        inspect.signature(fn).bind("gold", "response")
    except TypeError:
        raise UsageError(
            f"grader {target!r} cannot be called as fn(gold, response): {inspect.signature(fn)}"
        ) from None


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
    :mod:`ares_cli.grading.math_grader`), ``boxed_int``, ``choice``, ``choice_or_math`` (per row: choice
    where the record has options, else math, :mod:`ares_cli.grading.per_row`) and ``exact_match`` (short
    free-text answers on the full response, :mod:`ares_cli.grading.text`)."""
    math_warmup = (("1", "1"), (r"\frac{1}{2}", "0.5"), ("[1,2)", "[1, 2)"), ("x+1", "1+x"))
    return [
        GraderSpec(
            "math_verify",
            "ares_cli.grading.math_grader:math_grade",
            f"{math_verify_version()}+{RULES_VERSION}",
            extract=True,
            preload=("math_verify",),
            warmup=math_warmup,
            extractor="ares_cli.grading.final_answers:extract_final",
            accepts=("answer_forms", "tolerance", "round_to_gold", "any_of"),
        ),
        GraderSpec("boxed_int", "ares_cli.grading.graders:boxed_int_grade", f"ares-{__version__}", True),
        GraderSpec(
            "choice",
            "ares_cli.grading.choice:choice_grade",
            f"ares-{__version__}",
            extract=True,
            extractor="ares_cli.grading.choice:extract_for_gold",
            with_options=True,
            accepts=("multi_select",),
        ),
        GraderSpec(
            "choice_or_math",
            "ares_cli.grading.per_row:choice_or_math_grade",
            f"{math_verify_version()}+{RULES_VERSION}",
            extract=True,
            preload=("math_verify",),
            warmup=math_warmup,
            extractor="ares_cli.grading.per_row:extract_choice_or_math",
            with_options=True,
            accepts=("answer_forms", "tolerance", "round_to_gold", "any_of", "multi_select"),
        ),
        GraderSpec(
            "exact_match",
            "ares_cli.grading.text:exact_match_grade",
            f"ares-{__version__}",
            accepts=("answer_forms", "normalise", "any_of"),
        ),
    ]


ALIASES = {"math": "math_verify"}
JUDGE_NAME = re.compile(  # grading.judge
    r"^(?:(?P<rules>[A-Za-z_][\w.]*(?:\[[^\[\]]*\])?)\+)?judge(?::(?P<model>.+))?$"
)
ENTRY_POINT_GROUP = "ares.graders"
TRUST_FLAG = "--trust-grader-code"


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

    def resolve(self, grader: str | GraderSpec, *, trust_code: bool = False) -> GraderSpec:
        """A registered name, an installed ``ares.graders`` entry point, an already resolved spec, or
        (only with ``trust_code``: the user's opt-in) a ``module:function`` import path.

        Nothing is imported for an untrusted path: importing a module runs its code.
        """
        if isinstance(grader, GraderSpec):
            return grader
        if JUDGE_NAME.match(grader):
            raise UsageError(
                f"grader {grader!r} asks a judge model: it grades in ares eval and ares passrate "
                "(ares_cli.grading.judge_grading), not in grading workers"
            )
        from ares_cli.grading.options import split_ref

        try:
            name, options = split_ref(grader)
        except ValueError as e:
            raise UsageError(str(e)) from None
        spec = self._resolve_name(name, trust_code)
        return spec if options is None else spec.with_options_of(options)

    def _resolve_name(self, grader: str, trust_code: bool) -> GraderSpec:
        grader = ALIASES.get(grader, grader)
        if grader in self._specs:
            return self._specs[grader]
        installed = installed_graders()
        if grader in installed:
            return self._add(_entry_point_spec(grader, installed[grader]))
        if ":" in grader:
            split_target(grader)
            if not trust_code:
                raise UsageError(
                    f"grader {grader!r} is a module path: importing it runs that module's code, so it is "
                    f"used only with {TRUST_FLAG} on the command line (or install it as an "
                    f"'{ENTRY_POINT_GROUP}' entry point and name it)"
                )
            return GraderSpec(grader, grader, _source_version(load_target(grader)), extract=False)
        valid = ", ".join(sorted({*self.names(), *installed}))
        raise UsageError(
            f"unknown grader {grader!r}; valid graders: {valid}, judge, judge:MODEL, RULES+judge (or a "
            f"custom 'module:function' with {TRUST_FLAG})"
        )


def installed_graders() -> dict[str, str]:
    """Graders that installed packages declare as ``ares.graders`` entry points: name → ``module:attr``
    (read from package metadata; nothing is imported)."""
    from importlib.metadata import entry_points

    return {ep.name: f"{ep.module}:{ep.attr}" for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _entry_point_spec(name: str, value: str) -> GraderSpec:
    """Load an installed entry point's object and name it by where it is defined (workers import that)."""
    module_name, attr = split_target(value)
    try:
        obj: object = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"grader {name!r} (entry point {value!r}): cannot load it ({e})") from e
    if not inspect.isfunction(obj):
        raise UsageError(f"grader {name!r} (entry point {value!r}) is not a Python function")
    return GraderSpec(name, _target_of(obj), _source_version(obj), extract=False)


def is_registered(name: str, registry: GraderRegistry | None = None) -> bool:
    """Whether ``name`` is a grader name (built-in, alias, judge, or installed entry point), without
    importing anything: what a dataset manifest or a stored artifact may name."""
    judged = JUDGE_NAME.match(name)  # judge, judge:MODEL (a model, not code), RULES+judge
    if judged:
        return judged["rules"] is None or is_registered(judged["rules"], registry)
    from ares_cli.grading.options import split_ref

    try:
        base, options = split_ref(name)
    except ValueError:
        return False
    base = ALIASES.get(base, base)
    registry = registry or default_registry()
    if base not in registry and base not in installed_graders():
        return False
    if options is None:
        return True
    if base not in registry:  # an entry point takes no grading options
        return False
    try:
        registry.resolve(base).with_options_of(options)
    except UsageError:
        return False
    return True


def default_registry() -> GraderRegistry:
    """A fresh registry holding the built-in graders."""
    return GraderRegistry(builtin_specs())


def resolve_grader(
    grader: str | GraderSpec, registry: GraderRegistry | None = None, *, trust_code: bool = False
) -> GraderSpec:
    """Resolve a grader name/path against ``registry`` (default: the built-ins); ``trust_code`` allows a
    ``module:function`` path (the user's ``--trust-grader-code``)."""
    return (registry or default_registry()).resolve(grader, trust_code=trust_code)
