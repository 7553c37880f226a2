"""Exact-match grading of short free-text answers (BBEH): the ``exact_match`` grader, on the full response.

The answer is the last ``\\boxed{}`` content, else the text after the last ``answer is:`` / ``Answer:``
(BBEH's own instruction), else invalid. Both sides are compared after normalisation: case, surrounding
whitespace, ``$``, quotes, markdown bold, one pair of enclosing parentheses and a final period are ignored.
"""

from __future__ import annotations

import re

from ares_cli.grading.extract import extract_boxed
from ares_cli.grading.graders import CORRECT, INCORRECT, INVALID

_ANSWER = re.compile(r"answer(?:\s+is)?\s*[:：]\s*(.+)$", re.I | re.M)


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


def exact_match_grade(gold: str, response: str) -> str:
    """``correct`` when the final answer equals the gold after :func:`normalise_text`."""
    answer = final_answer(response)
    if answer is None:
        return INVALID
    return CORRECT if normalise_text(answer) == normalise_text(gold) else INCORRECT
