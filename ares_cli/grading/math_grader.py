"""The math grader: a gold and an extracted answer → correct, incorrect, or undecided by the rules.

Order of the rules (``docs/evaluation.md`` has the table of what each accepts and refuses):

1. Both texts are repaired (:func:`~ares_cli.grading.answer_forms.repair_escapes`). Several final
   answers (the response's boxes or ``Answer:`` lines that disagree, joined by
   :mod:`~ares_cli.grading.final_answers`) are correct only when every one is the gold, when together they
   are the gold's list (one box per solution), or when the last lists the gold and every earlier one is
   an item of it; any other set of answers is incorrect (a hedge). An ``Answer:`` label in front of the
   answer is dropped; the same plain text (wrappers, spacing, final period; case too when both are
   prose) is correct. An option label (``\\text{(D) } 24``) is compared as the letter with a letter gold,
   as its value with any other gold.
2. Clock times (``4:30 p.m.``) are compared as times, never as the ratio 4/30.
3. The gold may be read several ways, each tried: the parts of ``A \\Leftrightarrow B``; the parts of
   ``A or B`` when they are the same value written twice (``1048577 or 2^{20}+1``), else a list; the sides of
   ``A = B`` when every side is the same value (``2\\binom{30}{15} = 310235040``).
4. Gold and answer are read as lists of items (:func:`~ares_cli.grading.answer_forms.read_items`); a list
   equals a list as a multiset (order-insensitive), a single value never equals a list (``4, 4`` is not
   ``4``). The order counts for an ordering chain (``a < b < c`` against the list ``a, b, c``), for the
   values of a named tuple (read in the gold's name order: ``(n, m) = (2, 4)`` is ``(m, n) = (4, 2)``) and
   for a bare ``70,110`` read as a list (a multiset from five groups on). Inequalities in one variable
   (one, or several joined by ``or``/``and``/commas; a bound with no left side) equal an interval when
   they describe the same set.
5. Items are compared (:mod:`~ares_cli.grading.comparisons`) with math-verify
   (:mod:`~ares_cli.grading.exact_numbers`: exact numbers, implicit products kept), with ``\\log`` read as
   ``\\ln`` when the other side writes ``\\ln`` and a function's argument renamed (``f(y) = 2y`` is
   ``f(x) = 2x``); a chain of equalities must state the gold in every value, a bound is not a value.

Grading options (:mod:`~ares_cli.grading.options`, a benchmark's own conventions): ``any_of`` golds
accept any of their alternatives; ``tolerance`` accepts a number within it of a decimal gold,
``round_to_gold`` one that rounds to it.

*Undecided* is what the rules cannot read: prose, a relation against a value, renamed constants,
``\\cdots``/``cases``/several ``\\pm``, an unparseable side. :func:`math_grade` grades it incorrect;
:func:`math_triage_grade` grades it ``invalid``, so that ``math+judge`` hands it to the judge.
"""

from __future__ import annotations

import re

from ares_cli.grading.answer_forms import (
    clock_minutes,
    equation_sides,
    equivalent_statements,
    is_prose,
    or_parts,
    plain_text,
    read_items,
    repair_escapes,
    strip_delimiters,
    tuple_parts,
)
from ares_cli.grading.answer_statements import is_letter, option_label, strip_answer_label
from ares_cli.grading.comparisons import (
    _UNTRUSTED,
    UNDECIDED,
    best,
    compare_forms,
    compare_item,
    same_text,
)
from ares_cli.grading.final_answers import several_answers
from ares_cli.grading.graders import CORRECT, INCORRECT, INVALID
from ares_cli.grading.options import GradingOptions, gold_alternatives

__all__ = ["RULES_VERSION", "UNDECIDED", "gold_self_grade", "math_grade", "math_triage_grade", "verdict"]

RULES_VERSION = "rules2"
_NAME = re.compile(r"^(?:[A-Za-z](?:_\{?\w+\}?)?|[A-Za-z]+\s*\(\s*[A-Za-z]\s*\))$")
_EMBEDDED_MATH = re.compile(r"\\[(\[]|\$")


def _clock(gold: str, answer: str) -> str | None:
    """The verdict on clock times when either side is a time with am/pm; None when neither is."""
    g, a = clock_minutes(gold), clock_minutes(answer)
    if not ((g and g[1]) or (a and a[1])):
        return None
    if g is None or a is None:
        return UNDECIDED if is_prose(gold if g is None else answer) else INCORRECT
    (gm, g_half), (am, a_half) = g, a
    if g_half and a_half:
        return CORRECT if gm == am else INCORRECT
    unmarked = am if g_half else gm
    if 60 <= unmarked < 13 * 60:  # 4:30 without am/pm: 4:30 a.m. or p.m.
        return UNDECIDED if gm % 720 == am % 720 else INCORRECT
    return CORRECT if gm == am else INCORRECT


def _is_name(text: str) -> bool:
    return _NAME.match(plain_text(text)) is not None or tuple_parts(text) is not None


def gold_readings(gold: str) -> list[str]:
    """The golds a gold stands for (rule 3): equivalent statements, equal alternatives, equal sides."""
    statements = equivalent_statements(gold)
    if len(statements) > 1:
        return statements
    alternatives = or_parts(gold)
    if len(alternatives) > 1 and all(compare_forms(alternatives[0], x) == CORRECT for x in alternatives[1:]):
        return alternatives
    sides = equation_sides(gold)
    if len(sides) > 1 and not _is_name(sides[0]):
        if all(compare_forms(sides[-1], s) == CORRECT for s in sides[:-1]):
            return [gold, *sides]
    return [gold]


def _several(gold: str, answers: list[str], near: dict) -> str:
    """Several final answers against the gold (rule 1)."""
    verdicts = [verdict(gold, a, **near) for a in answers]
    if all(v == CORRECT for v in verdicts):
        return CORRECT
    together = INCORRECT
    if len(read_items(gold).items) > 1:
        together = verdict(gold, ", ".join(answers), **near)
        if together == CORRECT:
            return CORRECT
    if verdicts[-1] == CORRECT:
        listed = read_items(answers[-1]).items
        if all(any(compare_item(item, a) == CORRECT for item in listed) for a in answers[:-1]):
            return CORRECT
    if together == UNDECIDED or (INCORRECT not in verdicts and UNDECIDED in verdicts):
        return UNDECIDED
    return INCORRECT


def _labelled(gold: str, answer: str) -> str | None:
    """An option label on either side (rule 1): letters against letters, else values; None if neither."""
    g, a = option_label(gold), option_label(answer)
    if g is None and a is None:
        return None
    g_letter, a_letter = g[0] if g else is_letter(gold), a[0] if a else is_letter(answer)
    if g_letter and a_letter:
        return CORRECT if g_letter == a_letter else INCORRECT
    g_value = g[1] if g else (None if g_letter else gold)
    a_value = a[1] if a else (None if a_letter else answer)
    return verdict(g_value, a_value) if g_value and a_value else None


def verdict(gold: str, answer: str, *, tolerance: float | None = None, round_to_gold: bool = False) -> str:
    """``correct``, ``incorrect`` or ``undecided``: the rules of the module docstring, in order
    (``tolerance``, ``round_to_gold``: the benchmark's closeness for decimal golds)."""
    gold, answer = strip_delimiters(repair_escapes(gold)), strip_delimiters(repair_escapes(answer))
    if (golds := several_answers(gold)) is not None:  # a vote's representative: its answers as a list
        gold = ", ".join(golds)
    if (answers := several_answers(answer)) is not None:
        return _several(gold, answers, {"tolerance": tolerance, "round_to_gold": round_to_gold})
    answer = strip_answer_label(answer)
    if same_text(gold, answer):
        return CORRECT
    labelled = _labelled(gold, answer)
    if labelled is not None:
        return labelled
    clock = _clock(gold, answer)
    if clock is not None:
        return clock
    result = best(compare_forms(g, answer) for g in gold_readings(gold))
    if result != CORRECT and is_prose(gold) and _EMBEDDED_MATH.search(gold):
        result = best([result, _whole_text(gold, answer)])
    if result != CORRECT and (tolerance is not None or round_to_gold):
        from ares_cli.grading.exact_numbers import within_tolerance

        if within_tolerance(gold, answer, tolerance, round_to_gold):
            return CORRECT
    return result


def _whole_text(gold: str, answer: str) -> str:
    """A prose gold with its answer in embedded math (``the functions are \\[ f(x) = 0 ... \\]``):
    math-verify reads the math out of the whole text, compared exactly; correct or undecided."""
    from ares_cli.grading.exact_numbers import equal, parse_math

    g, a = parse_math(gold, answer), parse_math(answer, gold)
    return CORRECT if g and a and not _UNTRUSTED.search(gold + answer) and equal(g, a) else UNDECIDED


def _check_gold(gold: str, options: GradingOptions | None = None) -> None:
    from ares_cli.grading.exact_numbers import parse_math

    for alternative in gold_alternatives(gold, options):
        repaired = strip_delimiters(repair_escapes(alternative))
        if clock_minutes(repaired) is None and not parse_math(repaired):
            raise ValueError(f"math: gold answer {alternative!r} could not be parsed")


def graded(gold: str, answer: str, options: GradingOptions | None = None) -> str:
    """:func:`verdict` with a benchmark's grading options: the best over the gold's alternatives."""
    near = {"tolerance": options.tolerance, "round_to_gold": options.round_to_gold} if options else {}
    return best(verdict(g, answer, **near) for g in gold_alternatives(gold, options))


def math_grade(gold: str, answer: str, options: GradingOptions | None = None) -> str:
    """The ``math`` grader: correct or incorrect (undecided is incorrect); an unreadable gold is an error."""
    result = graded(gold, answer, options)
    if result == UNDECIDED:
        _check_gold(gold, options)
        return INCORRECT
    return result


def math_triage_grade(gold: str, answer: str, options: GradingOptions | None = None) -> str:
    """The rules of ``math+judge``: correct, incorrect, or ``invalid`` where the judge must decide."""
    result = graded(gold, answer, options)
    return INVALID if result == UNDECIDED else result


def gold_self_grade(gold: str, answer: str, options: GradingOptions | None = None) -> str:
    """``data check``: the gold must be readable and equal to its own boxed copy."""
    _check_gold(gold, options)
    if same_text(gold, answer):
        return CORRECT
    return CORRECT if graded(gold, answer, options) == CORRECT else INCORRECT
