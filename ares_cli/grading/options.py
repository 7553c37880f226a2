"""Grading options: a benchmark's own grading conventions, declared as plain data.

A manifest names its grader by registered name (``grader: math``) and may declare how its benchmark is
graded (``grading:``, a mapping of the options below); nothing in it names code. The options travel with
the grader's name as one string, its *reference* ``NAME[key=value,...]`` (``math_verify[answer_forms=
answer_line+boxed,tolerance=0.001]``), written canonically (keys sorted, defaults left out), so that
every stage that passes a grader name along (configs, plans, stored artifacts) carries them, and the grade
label (``name[options]==version``) and with it every cache and artifact key changes with them.

- ``answer_forms``: where a response states its final answer (:mod:`ares_cli.grading.final_answers`):
  ``boxed`` (every top-level ``\\boxed{}``), ``answer_line`` (a final ``Answer: ...`` line, DAPO's and
  Minerva's form), ``answer_phrase`` (the last "The final answer is ..." / "The answer is: ...", BBEH's).
  Default: the grader's own (``boxed`` for math).
- ``tolerance``: an absolute tolerance for golds written as decimal numbers (DynaMath's scorer accepts
  ``|answer - gold| <= 0.001``); exact comparison everywhere else.
- ``round_to_gold``: a number is also correct when rounded to a decimal gold's number of decimal places
  it is the gold (MathVista's scorer rounds the answer to the gold's precision: 1.449 for 1.45).
- ``normalise``: a benchmark's own text normalisation for ``exact_match``: ``bbeh`` (BBEH's fuzzy match).
- ``any_of``: a gold written as a list of quoted alternatives (``['1.5', '3/2']``) accepts any of them.
- ``multi_select``: a choice gold may name several letters (``A, C``); the response must name exactly
  that set.

Each grader accepts the options it can apply (:attr:`~ares_cli.grading.registry.GraderSpec.accepts`);
any other option, value or key is an error naming it.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, fields
from typing import Any

__all__ = [
    "ANSWER_FORMS", "NORMALISATIONS", "OPTION_KEYS", "GradingOptions", "gold_alternatives", "join_ref",
    "options_from_mapping", "options_from_suffix", "split_ref",
]  # fmt: skip

ANSWER_FORMS = ("boxed", "answer_line", "answer_phrase")
NORMALISATIONS = ("bbeh",)
_MAX_TOLERANCE = 1.0
_REF = re.compile(r"^(?P<name>[^\[\]\s]+?)(?:\[(?P<options>[^\[\]]*)\])?$")
_VALUE = re.compile(r"^[A-Za-z0-9_.+-]+$")


@dataclass(frozen=True)
class GradingOptions:
    """Validated grading options (module docstring); the defaults change nothing."""

    answer_forms: tuple[str, ...] | None = None
    tolerance: float | None = None
    normalise: str | None = None
    round_to_gold: bool = False
    any_of: bool = False
    multi_select: bool = False

    def given(self) -> dict[str, Any]:
        """The options that differ from the defaults, by key."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}

    def suffix(self) -> str:
        """The canonical ``[key=value,...]`` form (keys sorted), or "" when every option is the default."""
        given = self.given()
        if not given:
            return ""
        return "[" + ",".join(f"{k}={_format(v)}" for k, v in sorted(given.items())) + "]"

    def forms(self, default: tuple[str, ...]) -> tuple[str, ...]:
        return self.answer_forms or default


OPTION_KEYS = tuple(f.name for f in fields(GradingOptions))


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "+".join(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _check(key: str, value: Any) -> Any:
    """The validated value of one option; ValueError naming the option otherwise."""
    if key == "answer_forms":
        items = value if isinstance(value, (list, tuple)) else None
        if not items or not all(isinstance(x, str) for x in items):
            raise ValueError(
                f"answer_forms: expected a non-empty list of {', '.join(ANSWER_FORMS)}, got {value!r}"
            )
        unknown = [x for x in items if x not in ANSWER_FORMS]
        if unknown:
            raise ValueError(f"answer_forms: unknown form {unknown[0]!r} (known: {', '.join(ANSWER_FORMS)})")
        if len(set(items)) != len(items):
            raise ValueError(f"answer_forms: {items!r} names a form twice")
        return tuple(sorted(items))
    if key == "tolerance":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"tolerance: expected a number, got {value!r}")
        if not 0 < value <= _MAX_TOLERANCE:
            raise ValueError(f"tolerance: must be > 0 and <= {_MAX_TOLERANCE}, got {value!r}")
        return float(value)
    if key == "normalise":
        if value not in NORMALISATIONS:
            raise ValueError(
                f"normalise: unknown normalisation {value!r} (known: {', '.join(NORMALISATIONS)})"
            )
        return value
    if key in ("any_of", "multi_select", "round_to_gold"):
        if not isinstance(value, bool):
            raise ValueError(f"{key}: expected true or false, got {value!r}")
        return value
    raise ValueError(f"unknown grading option {key!r} (known: {', '.join(OPTION_KEYS)})")


def options_from_mapping(mapping: Any) -> GradingOptions:
    """Options from a manifest's ``grading:`` mapping; ValueError naming the first bad key or value."""
    if not isinstance(mapping, dict) or not mapping:
        raise ValueError(
            f"expected a non-empty mapping of grading options ({', '.join(OPTION_KEYS)}), got {mapping!r}"
        )
    return GradingOptions(**{str(k): _check(str(k), v) for k, v in mapping.items()})


def _parse_value(key: str, text: str) -> Any:
    if not _VALUE.match(text):
        raise ValueError(f"{key}: {text!r} is not a plain value")
    if key == "answer_forms":
        return text.split("+")
    if key == "tolerance":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"tolerance: expected a number, got {text!r}") from None
    if key in ("any_of", "multi_select", "round_to_gold"):
        return {"true": True, "false": False}.get(text, text)
    return text


def options_from_suffix(text: str) -> GradingOptions:
    """Options from the inside of a reference's ``[...]`` (``key=value`` pairs separated by commas)."""
    values: dict[str, Any] = {}
    for pair in text.split(","):
        key, sep, raw = pair.strip().partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"grading option {pair.strip()!r} is not key=value")
        if key in values:
            raise ValueError(f"grading option {key!r} is given twice")
        values[key] = _check(key, _parse_value(key, raw.strip()))
    return GradingOptions(**values)


def split_ref(ref: str) -> tuple[str, GradingOptions | None]:
    """``"math[tolerance=0.001]"`` → ``("math", GradingOptions(tolerance=0.001))``; no brackets → (ref, None).

    ValueError when the brackets do not close or an option is bad."""
    if "[" not in ref and "]" not in ref:
        return ref, None
    m = _REF.match(ref)
    if m is None:
        raise ValueError(f"grader {ref!r} is not a grader name with optional [key=value,...] after it")
    if m.group("options") is None:
        return m.group("name"), None
    return m.group("name"), options_from_suffix(m.group("options"))


def join_ref(name: str, options: GradingOptions | None) -> str:
    """The canonical reference of a grader name with options."""
    return name + (options.suffix() if options is not None else "")


def gold_alternatives(gold: str, options: GradingOptions | None) -> list[str]:
    """The golds an ``any_of`` gold stands for: the strings of a list literal ``['1.5', '3/2']`` (every
    entry quoted, so an interval ``[1, 2]`` stays one gold); ``[gold]`` otherwise or without ``any_of``."""
    text = gold.strip()
    if options is None or not options.any_of or not (text.startswith("[") and text.endswith("]")):
        return [gold]
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return [gold]
    if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
        return [v.strip() for v in value]
    return [gold]
