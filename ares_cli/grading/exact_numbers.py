"""Parsing with math-verify and comparing without floating-point closeness: equality is exact.

math-verify compares two numbers by rounding floats to 6 decimals and by evaluating the difference of two
exact expressions to 15 digits with ``chop=True``, so ``2^{1009}/(2^{1009}+1009)`` equals
``2^{1009}/(2^{1009}+2018)`` and ``0.00366`` equals ``1 - 65/(24e)``. :func:`same_value` replaces that
step (math-verify keeps its structures: sets, tuples, intervals, relations, matrices):

- a decimal is the exact rational it writes (``0.5`` = 1/2, ``1048.576`` = 2^17/125, ``0.333333`` ≠ 1/3);
- two numbers that differ at 30 significant digits are different; otherwise their difference is decided
  exactly (rational arithmetic, then ``simplify``, then sympy's ``equals``); a difference sympy can neither
  prove zero nor nonzero counts as zero only when it vanishes to 200 significant digits;
- a percentage ``x%`` against a plain gold ``g``: a gold with ``0 < |g| < 1`` is a fraction of a whole and
  accepts ``x%`` when ``x/100 = g`` (``0.35`` accepts ``35\\%``, refuses ``0.35\\%``); any other is a
  percentage's number or a count and accepts it when ``x = g`` (``35`` accepts ``35.0\\%``, ``25`` refuses
  ``2500\\%``); a percentage gold ``x%`` accepts ``x`` and ``x/100``.

Expressions with free symbols are left to math-verify's symbolic step (``simplify(a - b) == 0``), which
is exact. Parsing keeps implicit products: math-verify strips a trailing "unit" word after a number or a
space (``4bc`` → ``4``, ``2 a c`` → ``2 a``); here units are stripped only when what remains is a number.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

_CLOSE_DIGITS = 30
_UNDECIDED_DIGITS = 200


@lru_cache(maxsize=4)
def _configs(units: bool):
    from latex2sympy2_extended.latex2sympy2 import NormalizationConfig
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    norm = NormalizationConfig(
        basic_latex=True, units=units, malformed_operators=True, nits=True, boxed="all", equations=False
    )
    return [LatexExtractionConfig(normalization_config=norm), ExprExtractionConfig()], norm


_COMMAND = re.compile(r"\\[A-Za-z]+")
_BEFORE_GROUP = r"(?=\\left\s*\(|\(|\\[dt]?binom(?![A-Za-z]))"
_NUMBER_THEN_GROUP = re.compile(r"(?<![_^\d.])(\d+(?:\.\d+)?)\s*" + _BEFORE_GROUP)
_GROUP_THEN_GROUP = re.compile(r"\)\s*" + _BEFORE_GROUP)


def explicit_products(text: str) -> str:
    """``\\cdot`` where latex2sympy would add: ``2(3)`` is 5 and ``3\\binom{10}{4}`` is 3 + 210 there.

    A number (not a sub- or superscript digit) or a closing parenthesis followed by a parenthesis or a
    binomial is a product; ``2\\frac{1}{2}`` stays the mixed number 5/2."""
    return _GROUP_THEN_GROUP.sub(r") \\cdot ", _NUMBER_THEN_GROUP.sub(r"\1 \\cdot ", text))


@lru_cache(maxsize=8192)
def letters(text: str) -> frozenset[str]:
    """The Latin letters of ``text`` outside LaTeX command names."""
    return frozenset(re.findall(r"[A-Za-z]", _COMMAND.sub(" ", text)))


@lru_cache(maxsize=4096)
def _unit_strip(text: str) -> tuple[frozenset[str], bool]:
    """Letters math-verify's unit stripping removes from ``\\boxed{text}``, and whether a number is left."""
    from latex2sympy2_extended.latex2sympy2 import normalize_latex

    boxed = f"\\boxed{{{text}}}"
    stripped = normalize_latex(boxed, _configs(True)[1])
    plain = normalize_latex(boxed, _configs(False)[1])
    if stripped == plain:
        return frozenset(), True
    kept = len(os.path.commonprefix([stripped, plain]))
    return letters(plain[kept:]) or frozenset("?"), not letters(stripped)


@lru_cache(maxsize=4096)
def _parse(text: str, units: bool) -> tuple:
    from math_verify import parse

    extraction = _configs(units)[0]
    return tuple(parse(f"\\boxed{{{text}}}", extraction_config=extraction, parsing_timeout=None))


def parse_math(text: str, other: str = "") -> tuple:
    """math-verify's parse of ``\\boxed{text}`` with :func:`explicit_products`. Units are stripped only
    when a number is left and the other side of the comparison does not use the stripped letters
    (``\\frac{2}{3}m`` keeps its ``m`` against ``R = \\frac{2}{3}m``; ``5 m`` is 5 against ``5``)."""
    text = explicit_products(text)
    removed, number_left = _unit_strip(text)
    units = not removed or (number_left and not removed & letters(other))
    return _parse(text, units)


def _exact(value):
    """``value`` with every Float replaced by the rational its decimal digits write."""
    from sympy import Float, Rational

    floats = value.atoms(Float)
    return value.xreplace({f: Rational(str(f)) for f in floats}) if floats else value


def _percent(value):
    """(x, x/100) for a percentage ``x%`` as latex2sympy writes it; None otherwise."""
    from math_verify.grader import get_pct_val

    x = get_pct_val(value)
    return None if x is None else (x, x / 100)


def _is_fraction(value) -> bool:
    """Whether a plain gold reads as a fraction of a whole (``0 < |g| < 1``): then ``x%`` is ``x/100`` for
    it, else ``x`` (``25`` is a count or a percentage's number: ``2500%`` is not 25)."""
    from sympy import N

    size = abs(N(value, 30))
    return bool(size.is_comparable and 0 < size < 1)


def _gap_is_large(a, b, digits: int, tolerance: float) -> bool | None:
    """Whether ``|a - b| > tolerance * max(|a|, |b|)`` at ``digits`` digits; None when not comparable."""
    from sympy import N

    va, vb = N(a, digits), N(b, digits)
    gap, size = abs(va - vb), max(abs(va), abs(vb))
    if not (gap.is_comparable and size.is_comparable):
        return None
    return bool(gap > size * tolerance)


def _numbers_equal(a, b) -> bool:
    """Exact equality of two numeric (symbol-free) sympy values (module docstring)."""
    from sympy import simplify

    a, b = _exact(a), _exact(b)
    if a == b:
        return True
    if _gap_is_large(a, b, _CLOSE_DIGITS, 1e-20):  # before any exact evaluation of a power tower
        return False
    a, b = a.doit(), b.doit()
    if a == b:
        return True
    if not (a.is_finite and b.is_finite):
        return False
    diff = a - b
    if diff.is_Number:
        return bool(diff == 0)
    simplified = simplify(diff)
    if simplified.is_Number:
        return bool(simplified == 0)
    verdict = simplified.equals(0)
    if verdict is not None:
        return bool(verdict)
    return _gap_is_large(a, b, _UNDECIDED_DIGITS, 10.0 ** (20 - _UNDECIDED_DIGITS)) is False


def numeric_eq(a, b, float_rounding: int = 6, numeric_precision: int = 15) -> bool:  # noqa: ARG001
    """Drop-in for ``math_verify.grader.sympy_numeric_eq``: exact, never a rounded or chopped comparison."""
    from sympy import Basic, MatrixBase

    if isinstance(a, MatrixBase) and isinstance(b, MatrixBase):
        a, b = a.doit(), b.doit()
        return a.shape == b.shape and all(numeric_eq(x, y) for x, y in zip(a, b, strict=True))
    if not isinstance(a, Basic) or not isinstance(b, Basic) or a.free_symbols or b.free_symbols:
        return False
    pa, pb = _percent(a), _percent(b)
    try:
        if pa is not None and pb is None:
            return any(_numbers_equal(x, b) for x in pa)
        if pb is not None and pa is None:  # a plain gold: a fraction of a whole, else a percentage's number
            return _numbers_equal(a, pb[1]) if _is_fraction(a) else _numbers_equal(a, pb[0])
        return _numbers_equal(a, b)
    except (TypeError, ValueError, AttributeError, ZeroDivisionError):
        return False


def symbolic_eq(a, b) -> bool:
    """Drop-in for ``math_verify.grader.sympy_symbolic_eq``: floats read as the decimals they write first."""
    from sympy import Basic, MatrixBase, expand, expand_func, simplify

    try:
        if isinstance(a, Basic) and isinstance(b, Basic) and not (a.free_symbols or b.free_symbols):
            return False  # numbers were decided by numeric_eq
        diff = _exact(a) - _exact(b)
        if isinstance(diff, Basic) and expand(expand_func(diff)) == 0:  # polynomials, binomials: fast
            return True
        diff = simplify(diff)
        if isinstance(diff, MatrixBase):
            return bool(diff.is_zero_matrix)
        return bool(diff.is_zero)
    except Exception:  # noqa: BLE001 - sympy raises many kinds on odd inputs; not equal
        return False


@contextmanager
def exact_comparisons() -> Iterator[None]:
    """math-verify's numeric and symbolic steps replaced by the exact ones for the duration of a call."""
    from math_verify import grader

    saved = grader.sympy_numeric_eq, grader.sympy_symbolic_eq
    grader.sympy_numeric_eq, grader.sympy_symbolic_eq = numeric_eq, symbolic_eq
    try:
        yield
    finally:
        grader.sympy_numeric_eq, grader.sympy_symbolic_eq = saved


def equal(gold: tuple, answer: tuple) -> bool:
    """math-verify's ``verify(gold, answer)`` with exact number comparisons."""
    from math_verify import verify

    with exact_comparisons():
        return bool(verify(list(gold), list(answer), timeout_seconds=None))


_DECIMAL = re.compile(r"^[+-]?\d+\.\d+$")


def within_tolerance(gold: str, answer: str, tolerance: float | None, round_to_gold: bool = False) -> bool:
    """Whether ``answer`` is a real number within ``tolerance`` of a gold written as a decimal number
    (a benchmark's declared absolute tolerance: DynaMath's ``|answer - gold| <= 0.001``), or, with
    ``round_to_gold``, one that rounds (half up) to the gold at its number of decimals (MathVista's scorer);
    False for any other gold (integers, expressions, lists) and for an answer that is not one number."""
    from sympy import Eq, N, Rational, Symbol

    from ares_cli.grading.answer_forms import plain_text, read_items

    if not _DECIMAL.match(plain_text(gold)) or len(read_items(answer).items) != 1:
        return False
    parsed = parse_math(answer, gold)
    if not parsed:
        return False
    value = parsed[0]
    if isinstance(value, Eq) and isinstance(value.lhs, Symbol):
        value = value.rhs
    try:
        if _percent(value) is not None or value.free_symbols:
            return False
        number = _exact(value)
        number = number if number.is_Rational else N(number, 50)  # a decimal is the exact number it writes
        if not (number.is_real and number.is_comparable):
            return False
        gold_value = Rational(plain_text(gold))
        if tolerance is not None and abs(number - gold_value) <= Rational(repr(tolerance)):
            return True
        half = Rational(1, 2 * 10 ** len(plain_text(gold).split(".")[1]))
        return bool(round_to_gold and -half <= number - gold_value < half)  # rounds half up to the gold
    except (TypeError, ValueError, AttributeError):
        return False
