"""The math grader: a gold and an extracted answer → correct, incorrect, or undecided by the rules.

Order of the rules (``docs/evaluation.md`` has the table of what each accepts and refuses):

1. Both texts are repaired (:func:`~ares_cli.grading.answer_forms.repair_escapes`); the same plain text
   (wrappers, spacing, final period; case too when both are prose) is correct.
2. Clock times (``4:30 p.m.``) are compared as times, never as the ratio 4/30.
3. The gold may be read several ways, each tried: the parts of ``A \\Leftrightarrow B``; the parts of
   ``A or B`` when they are the same value written twice (``1048577 or 2^{20}+1``), else a list; the sides of
   ``A = B`` when every side is the same value (``2\\binom{30}{15} = 310235040``).
4. Gold and answer are read as lists of items (:func:`~ares_cli.grading.answer_forms.read_items`); a list
   equals a list as a multiset (order-insensitive), a single value never equals a list (``4, 4`` is not
   ``4``). The order counts for an ordering chain (``a < b < c`` against the list ``a, b, c``), for the
   values of a named tuple (read in the gold's name order: ``(n, m) = (2, 4)`` is ``(m, n) = (4, 2)``) and
   for a bare ``70,110`` read as a list (a multiset from five groups on).
5. Items are compared with math-verify (:mod:`~ares_cli.grading.exact`: exact numbers, implicit products
   kept), with ``\\log`` read as ``\\ln`` when the other side writes ``\\ln`` and a function's argument
   renamed (``f(y) = 2y`` is ``f(x) = 2x``).

*Undecided* is what the rules cannot read: prose, a relation against a value, renamed constants,
``\\cdots``/``cases``/several ``\\pm``, an unparseable side. :func:`math_grade` grades it incorrect;
:func:`math_triage_grade` grades it ``invalid``, so that ``math+judge`` hands it to the judge.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ares_cli.grading.answer_forms import (
    Items,
    clock_minutes,
    equation_sides,
    equivalent_statements,
    has_relation,
    is_prose,
    or_parts,
    plain_text,
    read_items,
    repair_escapes,
    strip_delimiters,
    thousands_groups,
    tuple_parts,
)
from ares_cli.grading.graders import CORRECT, INCORRECT, INVALID

__all__ = ["RULES_VERSION", "UNDECIDED", "gold_self_grade", "math_grade", "math_triage_grade", "verdict"]

UNDECIDED = "undecided"
RULES_VERSION = "rules1"
_UNTRUSTED = re.compile(r"\\(?:[cvl]?dots|begin\s*\{(?:cases|array)\})(?![A-Za-z])")
_BARE_LOG = re.compile(r"\\log(?![A-Za-z_])")
_NAME = re.compile(r"^(?:[A-Za-z](?:_\{?\w+\}?)?|[A-Za-z]+\s*\(\s*[A-Za-z]\s*\))$")
_ORDERED_GROUPS = 5
_EMBEDDED_MATH = re.compile(r"\\[(\[]|\$")


def _best(verdicts) -> str:
    """The most favourable verdict of an iterable (stops at the first correct)."""
    seen = INCORRECT
    for v in verdicts:
        if v == CORRECT:
            return CORRECT
        if v == UNDECIDED:
            seen = UNDECIDED
    return seen


def _same_text(gold: str, answer: str) -> bool:
    g, a = plain_text(gold), plain_text(answer)
    return bool(g) and (g == a or (is_prose(g) and is_prose(a) and g.casefold() == a.casefold()))


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


def _ln_for_log(gold: str, answer: str) -> tuple[str, str]:
    """Bare ``\\log`` read as ``\\ln`` on one side when the other side writes ``\\ln``."""
    if "\\ln" in answer and _BARE_LOG.search(gold) and "\\ln" not in gold:
        gold = _BARE_LOG.sub(r"\\ln", gold)
    elif "\\ln" in gold and _BARE_LOG.search(answer) and "\\ln" not in answer:
        answer = _BARE_LOG.sub(r"\\ln", answer)
    return gold, answer


def _renamed_argument(gold, answer):
    """``answer`` with its function argument renamed to the gold's (``f(y) = 2y`` → ``f(x) = 2x``); or None."""
    from sympy import Eq, Symbol
    from sympy.core.function import AppliedUndef

    if not (isinstance(gold, Eq) and isinstance(answer, Eq)):
        return None
    g, a = gold.lhs, answer.lhs
    if not (isinstance(g, AppliedUndef) and isinstance(a, AppliedUndef) and g.func == a.func):
        return None
    if len(g.args) != 1 or len(a.args) != 1 or not all(isinstance(x.args[0], Symbol) for x in (g, a)):
        return None
    old, new = a.args[0], g.args[0]
    if old == new or new in answer.rhs.free_symbols:
        return None
    return answer.xreplace({old: new})


def _kind(parsed) -> str:
    from latex2sympy2_extended.logic import And
    from sympy.core.relational import Relational

    return "relation" if isinstance(parsed, (Relational, And)) else "value"


def _undecided(gold: str, answer: str, g, a) -> bool:
    """Whether the rules cannot tell ``gold`` and ``answer`` apart as different (module docstring)."""
    if is_prose(gold) or is_prose(answer):
        return True
    if _kind(g) != _kind(a):
        return True
    try:
        gs, as_ = g.free_symbols, a.free_symbols
    except AttributeError:
        return True
    return bool(gs) and len(gs) == len(as_) and gs != as_


def _relations_in_other_symbols(g, a) -> bool:
    """Two relations over different symbols: never equal, and math-verify would ``solve`` them (slow)."""
    try:
        return _kind(g) == _kind(a) == "relation" and g.free_symbols != a.free_symbols
    except AttributeError:
        return False


@lru_cache(maxsize=8192)
def compare_item(gold: str, answer: str) -> str:
    """One gold item against one answer item (rule 5)."""
    from ares_cli.grading.exact import equal, parse_math

    if _same_text(gold, answer):
        return CORRECT
    if _UNTRUSTED.search(gold) or _UNTRUSTED.search(answer):
        return UNDECIDED
    gold, answer = _ln_for_log(gold, answer)
    g, a = parse_math(gold, answer), parse_math(answer, gold)
    if not g or not a:
        return UNDECIDED
    renamed = _renamed_argument(g[0], a[0])
    if renamed is not None and equal(g[:1], (renamed,)):
        return CORRECT
    if not _relations_in_other_symbols(g[0], a[0]) and equal(g, a):
        return CORRECT
    return UNDECIDED if _undecided(gold, answer, g[0], a[0]) else INCORRECT


def _compare_in_order(golds, answers) -> str:
    verdicts = [compare_item(g, a) for g, a in zip(golds, answers, strict=True)]
    if all(v == CORRECT for v in verdicts):
        return CORRECT
    return INCORRECT if INCORRECT in verdicts else UNDECIDED


def _compare_as_multiset(golds, answers) -> str:
    left = list(answers)
    rest = []
    for g in golds:  # the same text first: no parsing
        same = next((i for i, a in enumerate(left) if plain_text(a) == plain_text(g)), None)
        if same is None:
            rest.append(g)
        else:
            del left[same]
    undecided = False
    for g in rest:
        for i, a in enumerate(left):
            v = compare_item(g, a)
            if v == CORRECT:
                del left[i]
                break
            undecided |= v == UNDECIDED
        else:
            return UNDECIDED if undecided else INCORRECT
    return CORRECT


def _by_names(values: tuple[str, ...], names: tuple[str, ...], order: tuple[str, ...]) -> tuple[str, ...]:
    position = dict(zip(names, values, strict=True))
    return tuple(position[n] for n in order)


def compare_items(gold: Items, answer: Items) -> str:
    """Gold items against answer items (rule 4)."""
    g, a = gold.items, answer.items
    if answer.chain and len(g) == len(answer.chain) > 1:
        return _compare_in_order(g, answer.chain)
    if gold.chain and len(a) == len(gold.chain) > 1:
        return _compare_in_order(gold.chain, a)
    if gold.ordered and answer.ordered and gold.names and set(gold.names) == set(answer.names):
        a = _by_names(a, answer.names, gold.names)
    if len(g) == 1 and len(a) > 1 and (parts := tuple_parts(g[0])) and len(parts) == len(a):
        return _compare_in_order(parts, a)
    if len(a) == 1 and len(g) > 1 and (parts := tuple_parts(a[0])) and len(parts) == len(g):
        return _compare_in_order(g, parts)
    if len(g) == 1 and len(a) == 1:
        verdict = compare_item(g[0], a[0])
    elif len(g) != len(a):
        verdict = INCORRECT
    elif gold.ordered or answer.ordered:
        verdict = _compare_in_order(g, a)
    else:
        verdict = _compare_as_multiset(g, a)
    unread = gold.unread or answer.unread or any(is_prose(x) or has_relation(x) for x in g + a)
    if verdict == INCORRECT and len(g) + len(a) > 2 and unread:
        return UNDECIDED
    return verdict


def _readings(text: str) -> list[Items]:
    """A text as items; a bare ``110,143,242`` both as the number and as the list (rule 4)."""
    groups = thousands_groups(plain_text(text))
    if groups is None:
        return [read_items(text)]
    return [Items(("".join(groups),)), Items(tuple(groups), ordered=len(groups) < _ORDERED_GROUPS)]


def _inequalities_set(text: str, items: tuple[str, ...]):
    """The set that two or more inequalities in one variable describe (``x < -2 or x > 3``), or None.

    Joined by ``or`` they are a union, by ``and`` an intersection; joined by commas a union when they
    are disjoint (``r > 3, r < 49/27``: "and" would be empty) and an intersection otherwise."""
    from sympy import Intersection, Union
    from sympy.core.relational import Relational

    from ares_cli.grading.exact import parse_math

    if len(items) < 2 or not all(has_relation(x) for x in items):
        return None
    relations = [next(iter(parse_math(x)), None) for x in items]
    if not all(isinstance(r, Relational) and len(r.free_symbols) == 1 for r in relations):
        return None
    if len({r.free_symbols.pop() for r in relations}) != 1:
        return None
    sets = [r.as_set() for r in relations]
    if len(or_parts(text)) > 1:
        return Union(*sets)
    disjoint = all(Intersection(a, b).is_empty for i, a in enumerate(sets) for b in sets[i + 1 :])
    joined_by_and = re.search(r"(?<![A-Za-z])and(?![A-Za-z])", text) is not None
    return Union(*sets) if disjoint and not joined_by_and else Intersection(*sets)


def _interval_set(text: str):
    """A union of intervals, or an interval with an infinite or closed end (not a point ``(a, b)``)."""
    from sympy import Interval, Union

    from ares_cli.grading.exact import parse_math

    value = next(iter(parse_math(text)), None)
    if isinstance(value, Union) or (
        isinstance(value, Interval) and not (value.left_open and value.right_open and value.measure.is_finite)
    ):
        return value
    return None


def _inequalities_against_interval(gold: str, answer: str, g: Items, a: Items) -> str | None:
    """Inequalities on one side against intervals on the other: equal as sets, or None if not that case."""
    for relations_text, rel_items, other in ((gold, g.items, answer), (answer, a.items, gold)):
        described = _inequalities_set(relations_text, rel_items)
        if described is not None and (interval := _interval_set(other)) is not None:
            return CORRECT if described.symmetric_difference(interval).is_empty else INCORRECT
    return None


def compare_forms(gold: str, answer: str) -> str:
    """Every reading of the gold against every reading of the answer (rule 4)."""
    answers = _readings(answer)
    golds = _readings(gold)
    if len(golds) == len(answers) == 1:
        verdict = _inequalities_against_interval(gold, answer, golds[0], answers[0])
        if verdict is not None:
            return verdict
    return _best(compare_items(g, a) for g in golds for a in answers)


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


def verdict(gold: str, answer: str) -> str:
    """``correct``, ``incorrect`` or ``undecided``: the rules of the module docstring, in order."""
    gold, answer = strip_delimiters(repair_escapes(gold)), strip_delimiters(repair_escapes(answer))
    if _same_text(gold, answer):
        return CORRECT
    clock = _clock(gold, answer)
    if clock is not None:
        return clock
    result = _best(compare_forms(g, answer) for g in gold_readings(gold))
    if result != CORRECT and is_prose(gold) and _EMBEDDED_MATH.search(gold):
        return _best([result, _whole_text(gold, answer)])
    return result


def _whole_text(gold: str, answer: str) -> str:
    """A prose gold with its answer in embedded math (``the functions are \\[ f(x) = 0 ... \\]``):
    math-verify reads the math out of the whole text, compared exactly; correct or undecided."""
    from ares_cli.grading.exact import equal, parse_math

    g, a = parse_math(gold, answer), parse_math(answer, gold)
    return CORRECT if g and a and not _UNTRUSTED.search(gold + answer) and equal(g, a) else UNDECIDED


def _check_gold(gold: str) -> None:
    from ares_cli.grading.exact import parse_math

    repaired = strip_delimiters(repair_escapes(gold))
    if clock_minutes(repaired) is None and not parse_math(repaired):
        raise ValueError(f"math: gold answer {gold!r} could not be parsed")


def math_grade(gold: str, answer: str) -> str:
    """The ``math`` grader: correct or incorrect (undecided is incorrect); an unreadable gold is an error."""
    result = verdict(gold, answer)
    if result == UNDECIDED:
        _check_gold(gold)
        return INCORRECT
    return result


def math_triage_grade(gold: str, answer: str) -> str:
    """The rules of ``math+judge``: correct, incorrect, or ``invalid`` where the judge must decide."""
    result = verdict(gold, answer)
    return INVALID if result == UNDECIDED else result


def gold_self_grade(gold: str, answer: str) -> str:
    """``data check``: the gold must be readable and equal to its own boxed copy."""
    _check_gold(gold)
    return CORRECT if verdict(gold, answer) == CORRECT else INCORRECT
