"""Exact-match grading of short free-text answers (BBEH): the ``exact_match`` grader, on the full response.

The answer is the last ``\\boxed{}`` content, else the text after the last ``answer is:`` / ``Answer:``
(BBEH's own instruction), else invalid. Both sides are compared after normalisation: case, surrounding
whitespace, ``$``, quotes, markdown bold, one pair of enclosing parentheses and a final period are ignored.

With grading options (:mod:`ares_cli.grading.options`): ``answer_forms`` reads the final answers in
those forms instead (several different ones are incorrect); ``normalise: bbeh`` compares as BBEH's own
scorer does (:func:`bbeh_match`); ``any_of`` golds accept any of their alternatives.
"""

from __future__ import annotations

import re

from ares_cli.grading.extract import extract_boxed
from ares_cli.grading.graders import CORRECT, INCORRECT, INVALID

_ANSWER = re.compile(r"answer(?:\s+is)?\s*[:：]\s*(.+)$", re.I | re.M)
_LATEX_WRAPPER = re.compile(r"^\\(?:boxed|text|texttt|textbf|mathrm)\s*\{(.*)\}$", re.S)


def normalise_text(text: str) -> str:
    """Case-, space- and punctuation-insensitive form of a short answer."""
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text)
    text = text.replace("$", "").replace("**", "").strip().strip("\"'`").strip().rstrip(".").strip()
    if text.startswith("(") and text.endswith(")") and text.count("(") == 1:
        text = text[1:-1].strip()
    return " ".join(text.split()).casefold()


def final_answer(response: str) -> str | None:
    """The response's final short answer (boxed, else after the last ``answer is:``)."""
    boxed = extract_boxed(response)
    if boxed is not None:
        return boxed
    found = _ANSWER.findall(response or "")
    return found[-1].strip() if found and found[-1].strip() else None


def _bbeh_form(text: str) -> str:
    """An answer as BBEH's scorer prepares it: LaTeX wrappers and ``$`` off, lower case, ``", "`` as
    ``","``, no ``**``, the first line, no final period."""
    text = text.strip()
    if len(text) > 1 and text.startswith("$") and text.endswith("$"):
        text = text[1:-1].strip()
    while (m := _LATEX_WRAPPER.match(text)) is not None:
        text = m.group(1).strip()
    text = text.lower().replace(", ", ",").replace("**", "").split("\n")[0].strip()
    return text[:-1] if text.endswith(".") else text


def bbeh_match(answer: str, gold: str) -> bool:
    """BBEH's fuzzy match: equal after :func:`_bbeh_form`, or ``(a)`` for ``a``, the same number (``404``
    and ``404.0``), equal without quotes, one side in brackets (``[a,b]``), or a trailing question mark."""
    a, g = _bbeh_form(answer), _bbeh_form(gold)
    if a == g:
        return True
    for one, other in ((a, g), (g, a)):
        if len(one) == 3 and one[0] == "(" and one[2] == ")":
            return one[1] == other
    try:
        if float(a) == float(g):
            return True
    except ValueError:
        pass
    return (
        a.replace("'", "") == g.replace("'", "")
        or a == f"[{g}]"
        or g == f"[{a}]"
        or (a.endswith("?") and a[:-1] == g)
    )


def _same(answer: str, gold: str, options) -> bool:
    if options is not None and options.normalise == "bbeh":
        return bbeh_match(answer, gold)
    return normalise_text(answer) == normalise_text(gold)


def exact_match_grade(gold: str, response: str, options=None) -> str:
    """``correct`` when the final answer equals the gold after normalisation (module docstring)."""
    from ares_cli.grading.options import gold_alternatives

    if options is not None and options.answer_forms:
        from ares_cli.grading.final_answers import final_answers

        answers = final_answers(response, options.answer_forms)
    else:
        answers = [a] if (a := final_answer(response)) is not None else []
    if not answers:
        return INVALID
    golds = gold_alternatives(gold, options)
    if len({normalise_text(a) for a in answers}) > 1:  # several different final answers
        return INCORRECT
    return CORRECT if any(_same(answers[-1], g, options) for g in golds) else INCORRECT
