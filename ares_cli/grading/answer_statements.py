"""What an answer states besides a value, read on the text before any parsing (no sympy).

- an **answer label** in front (``\\text{Answer: } 7``, ``Final answer: 7``) is not part of the answer;
- an **option label** (``\\text{(D) } 24``, ``(D) 24``) names a choice: a letter gold is compared with the
  letter, any other gold with what follows the label (the option's value);
- a **bound with no left side** (``\\geq 5``) is a bound, not the number 5;
- a **chain of equalities** (``x = 2 + 3 = 5``) states each of its values: every one must be the answer
  (``x = 5 = 6`` is not 6), not only the last;
- a **set named in words**: "all real numbers" (and the like) is the interval ``(-\\infty, \\infty)``;
  only these exact phrases ("all positive real numbers" stays prose).
"""

from __future__ import annotations

import re

from ares_cli.grading.answer_forms import equation_sides, plain_text

__all__ = ["bound_relation", "chain_values", "named_set", "option_label", "strip_answer_label"]

_ANSWER_LABEL = re.compile(
    r"^\s*(?:\\text(?:bf|rm)?\s*\{\s*)?(?:final\s+)?answer\s*[:：]\s*(?:\}\s*)?(?=\S)", re.I
)
_OPTION_LABEL = re.compile(
    r"^\s*(?:\\text(?:bf|rm)?\s*\{\s*\(([A-Z])\)\s*\}|\(([A-Z])\)|\\text(?:bf|rm)?\s*\{\s*\(([A-Z])\)\s+)"
)
_LETTER = re.compile(r"^\(?([A-Z])\)?$")
_LEADING_RELATION = re.compile(r"^\s*(\\(?:geq?|leq?|gt|lt|geqslant|leqslant)(?![A-Za-z])|>=|<=|>|<)")
_REALS = (
    "all real numbers", "all reals", "all real values", "every real number", "any real number",
    "the set of all real numbers", "the set of real numbers", "all real x", "all real values of x",
    "x is any real number", "x can be any real number", "all real numbers x",
)  # fmt: skip
REALS = r"(-\infty, \infty)"


def strip_answer_label(text: str) -> str:
    """``text`` without a leading ``Answer:`` label (in ``\\text{}`` or not); the text itself otherwise."""
    m = _ANSWER_LABEL.match(text)
    if m is None:
        return text
    rest = text[m.end() :]
    if text.lstrip().startswith("\\text") and "}" not in text[: m.end()]:
        rest = rest.replace("}", "", 1)  # \text{Answer: 7}
    return rest.strip()


def option_label(text: str) -> tuple[str, str] | None:
    """``(letter, rest)`` of an answer written with an option label in front (``\\text{(D) } 24`` →
    ``("D", "24")``; ``(D)`` alone → ``("D", "")``); None otherwise. A bare ``(x)`` or a tuple is none."""
    m = _OPTION_LABEL.match(text)
    if m is None:
        letter = _LETTER.match(plain_text(text))
        return (letter.group(1), "") if letter and text.strip().startswith(("(", "\\text")) else None
    letter = m.group(1) or m.group(2) or m.group(3)
    rest = text[m.end() :]
    if m.group(3):  # \text{(D) 24}: the value is inside the wrapper
        rest = rest.replace("}", "", 1)
    return letter, rest.strip()


def is_letter(text: str) -> str | None:
    """The letter of a gold that is one option letter (``D``, ``(D)``), else None."""
    m = _LETTER.match(plain_text(text))
    return m.group(1) if m else None


def bound_relation(text: str) -> str | None:
    """The relation sign a bound with no left side starts with (``\\geq 5`` → ``\\geq``), else None."""
    m = _LEADING_RELATION.match(text)
    return m.group(1) if m else None


def chain_values(text: str) -> list[str] | None:
    """The values a chain of equalities states: its sides after the first, and the first too when it is
    a number (``2 + 3 = 5``: both); None unless there are two or more (``a + b = 7`` states one)."""
    sides = equation_sides(text)
    if len(sides) < 2:
        return None
    values = sides[1:] if re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", sides[0])) else sides
    return values if len(values) >= 2 else None


def named_set(text: str) -> str | None:
    """``(-\\infty, \\infty)`` for an answer that names the real numbers in words; None otherwise."""
    words = " ".join(plain_text(text).replace("$", " ").split()).casefold().rstrip(".")
    return REALS if words in _REALS else None
