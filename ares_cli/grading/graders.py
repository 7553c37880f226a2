"""Built-in graders: ``grader(gold, answer) -> grade``, run inside the pool's worker processes.

Built-ins receive the *extracted* answer (the pool grades a missing one ``invalid`` without calling them).
They carry no timeout of their own: the pool's workers bound every call (soft alarm + hard kill).
"""

from __future__ import annotations

import re

__all__ = [
    "CORRECT", "INCORRECT", "INVALID", "TIMEOUT", "ERROR", "GRADES", "normalize_grade", "boxed_int_grade",
    "math_verify_grade", "math_verify_version"
]  # fmt: skip

CORRECT, INCORRECT, INVALID, TIMEOUT, ERROR = "correct", "incorrect", "invalid", "timeout", "error"
GRADES = (CORRECT, INCORRECT, INVALID, TIMEOUT, ERROR)

_INT = re.compile(r"[+-]?\d+")
_INT_NOISE = re.compile(r"\\[,!;: ]|[\s$]")


def normalize_grade(value: object) -> str:
    """Map a grader's return value (bool or grade string) to a grade; raise TypeError/ValueError otherwise."""
    if isinstance(value, bool):
        return CORRECT if value else INCORRECT
    if isinstance(value, str) and value in GRADES:
        return value
    if isinstance(value, str):
        raise ValueError(f"grader returned unknown grade {value!r}; expected one of {', '.join(GRADES)}")
    raise TypeError(f"grader returned {type(value).__name__}; expected bool or one of {', '.join(GRADES)}")


def _as_int(text: str) -> int | None:
    text = _INT_NOISE.sub("", text).replace("{,}", "").removeprefix("{").removesuffix("}")
    return int(text) if _INT.fullmatch(text) else None


def boxed_int_grade(gold: str, answer: str) -> str:
    """Exact integer comparison (the toy world's grader); a non-integer gold is an ``error``."""
    g = _as_int(gold)
    if g is None:
        raise ValueError(f"boxed_int: gold answer {gold!r} is not an integer")
    return CORRECT if _as_int(answer) == g else INCORRECT


def math_verify_grade(gold: str, answer: str) -> str:
    """Raw math-verify, gold first, both sides wrapped in ``\\boxed{}`` before ``parse`` (bare gold is mangled).

    The ``math_verify`` grader of the registry is :func:`ares_cli.grading.math_grader.math_grade` (this call
    with exact numbers and the answer-form rules); this one is the benchmarks' naive reference."""
    from math_verify import parse, verify

    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
    if not gold_parsed:
        raise ValueError(f"math_verify: gold answer {gold!r} could not be parsed")
    pred_parsed = parse(f"\\boxed{{{answer}}}", parsing_timeout=None)
    if not pred_parsed:
        return INCORRECT
    return CORRECT if verify(gold_parsed, pred_parsed, timeout_seconds=None) else INCORRECT


def math_verify_version() -> str:
    """Installed math-verify version (part of every grade's provenance and cache key)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("math-verify")
    except PackageNotFoundError:
        return "unknown"
