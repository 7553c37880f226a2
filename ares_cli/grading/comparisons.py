"""Comparing an answer with a gold once both are read as items (rules 4 and 5 of
:mod:`ares_cli.grading.math_grader`): one item against one item with math-verify (exact numbers,
:mod:`~ares_cli.grading.exact_numbers`), lists as multisets or in order, ordering chains, named tuples, and
inequalities against intervals; what an item states besides a value (a chain of equalities, a bound, a set
named in words: :mod:`~ares_cli.grading.answer_statements`) is read first.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ares_cli.grading.answer_forms import (
    Items,
    has_relation,
    is_prose,
    or_parts,
    plain_text,
    read_items,
    thousands_groups,
    tuple_parts,
)
from ares_cli.grading.answer_statements import bound_relation, chain_values, named_set
from ares_cli.grading.graders import CORRECT, INCORRECT

__all__ = ["UNDECIDED", "best", "compare_forms", "compare_item", "compare_items", "same_text"]

UNDECIDED = "undecided"
_UNTRUSTED = re.compile(r"\\(?:[cvl]?dots|begin\s*\{(?:cases|array)\})(?![A-Za-z])")
_BARE_LOG = re.compile(r"\\log(?![A-Za-z_])")
_ORDERED_GROUPS = 5


def best(verdicts) -> str:
    """The most favourable verdict of an iterable (stops at the first correct)."""
    seen = INCORRECT
    for v in verdicts:
        if v == CORRECT:
            return CORRECT
        if v == UNDECIDED:
            seen = UNDECIDED
    return seen


def same_text(gold: str, answer: str) -> bool:
    g, a = plain_text(gold), plain_text(answer)
    return bool(g) and (g == a or (is_prose(g) and is_prose(a) and g.casefold() == a.casefold()))


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


def _statement(gold: str, answer: str) -> str | None:
    """An answer that states more than a value against a gold that is a value: a bound is not the value
    (``\\geq 5`` is not 5), and a chain of equalities is correct only when every value it states is the
    gold (``x = 5 = 6`` is not 6); None for any other answer."""
    if has_relation(gold):
        return None
    if bound_relation(answer) is not None:
        return UNDECIDED if is_prose(gold) else INCORRECT
    values = chain_values(answer)
    if values is None:
        return None
    verdicts = [compare_item(gold, v) for v in values]
    if all(v == CORRECT for v in verdicts):
        return CORRECT
    return INCORRECT if INCORRECT in verdicts else UNDECIDED


@lru_cache(maxsize=8192)
def compare_item(gold: str, answer: str) -> str:
    """One gold item against one answer item (rule 5)."""
    from ares_cli.grading.exact_numbers import equal, parse_math

    if same_text(gold, answer):
        return CORRECT
    gold, answer = named_set(gold) or gold, named_set(answer) or answer
    stated = _statement(gold, answer)
    if stated is not None:
        return stated
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
    """The set that inequalities in one variable describe (``x \\geq 2``; ``x < -2 or x > 3``), or None.

    Joined by ``or`` they are a union, by ``and`` an intersection; joined by commas a union when they
    are disjoint (``r > 3, r < 49/27``: "and" would be empty) and an intersection otherwise."""
    from sympy import And, Intersection, Union
    from sympy.core.relational import Relational

    from ares_cli.grading.exact_numbers import parse_math

    if not items or not all(has_relation(x) for x in items):
        return None
    relations = [next(iter(parse_math(x)), None) for x in items]  # a chain a <= x <= b is an And
    if not all(isinstance(r, (Relational, And)) and len(r.free_symbols) == 1 for r in relations):
        return None
    if len({r.free_symbols.pop() for r in relations}) != 1:
        return None
    try:
        sets = [r.as_set() for r in relations]
    except (NotImplementedError, TypeError, ValueError):  # x = 2 + 3 = 5: not a set sympy can write
        return None
    if len(or_parts(text)) > 1:
        return Union(*sets)
    disjoint = all(Intersection(a, b).is_empty for i, a in enumerate(sets) for b in sets[i + 1 :])
    joined_by_and = re.search(r"(?<![A-Za-z])and(?![A-Za-z])", text) is not None
    return Union(*sets) if disjoint and not joined_by_and else Intersection(*sets)


def _interval_set(text: str):
    """A union of intervals, or an interval with an infinite or closed end (not a point ``(a, b)``)."""
    from sympy import Interval, Union

    from ares_cli.grading.exact_numbers import parse_math

    value = next(iter(parse_math(text)), None)
    if isinstance(value, Union) or (
        isinstance(value, Interval) and not (value.left_open and value.right_open and value.measure.is_finite)
    ):
        return value
    return None


def _inequalities_against_interval(gold: str, answer: str, g: Items, a: Items) -> str | None:
    """Inequalities on one side against intervals on the other: equal as sets, or None if not that case.
    A bound with no left side (``\\geq 2``) is read as a bound on a variable (``x \\geq 2``)."""
    for relations_text, rel_items, other in ((gold, g.items, answer), (answer, a.items, gold)):
        if not rel_items or not all(has_relation(x) for x in rel_items):
            continue
        if (interval := _interval_set(other)) is None:  # first: most relations meet no interval
            continue
        if len(rel_items) == 1 and bound_relation(rel_items[0]) is not None:
            relations_text = f"x {rel_items[0]}"
            rel_items = (relations_text,)
        described = _inequalities_set(relations_text, rel_items)
        if described is not None:
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
    return best(compare_items(g, a) for g in golds for a in answers)
