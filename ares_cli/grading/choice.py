"""Multiple-choice grading: read a response's final option letter and compare it with the gold letter.

The gold handed to the grader is either a bare letter (``"B"``) or, when the record carries its options
(``meta.options``), the JSON payload built by :func:`choice_gold` (``{"answer": ..., "options": [...]}``),
whose answer may be the letter or the option's exact text. A response's final choice is read, in order
of precedence, from:

1. the last ``\\boxed{...}``: ``\\boxed{B}``, ``\\boxed{(B)}``, ``\\boxed{B. text}``, ``\\boxed{\\text{B}}`` or
   an option's exact text;
2. otherwise the last ``Answer: ...`` (``answer is:`` too), read the same way;
3. otherwise the last non-empty line, when it is a choice by itself (``(B)``, ``B.``, ``\\text{(B)}``,
   ``B) text``, an option's exact text) or names exactly one parenthesised letter (``so the answer is (B).``).

Anything else is ``invalid``: a letter inside a sentence ("A quick check ..."), two letters ("A or B"),
a box around a non-choice. Option text matches exactly after whitespace, ``$`` and case normalisation, so an
option that contains another's text ("12" vs "2") cannot be confused with it. Letters are upper case A-Z,
limited to the number of options when they are known. Majority votes group by the extracted letter.

With the grading option ``multi_select`` (:mod:`ares_cli.grading.options`) a gold may name several letters
(``A, C``): the response must name exactly that set, its letters separated by commas, semicolons, ``&`` or
"and" (``C and A``); letters joined by "or" are a hedge (invalid), a missing or extra one is incorrect.
"""

from __future__ import annotations

import ast
import json
import re
import string
from collections.abc import Sequence
from typing import Any

from ares_cli.grading.extract import extract_boxed
from ares_cli.grading.graders import CORRECT, INCORRECT

LETTERS = string.ascii_uppercase
_WRAPPER = re.compile(r"^\\(?:text|textbf|mathrm|mathbf|textit|operatorname)\s*\{(.*)\}$", re.S)
_ANSWER = re.compile(r"\banswer(?:\s+is)?\s*[:：]\s*(.*)$", re.I | re.M)
_LETTER_ONLY = re.compile(r"^\(?([A-Z])\)?[.:]?$")
_LETTER_THEN_TEXT = re.compile(r"^\(?([A-Z])[).:]\s+(\S.*)$", re.S)
_PAREN_LETTER = re.compile(r"(?:\\text\{\s*)?\(([A-Z])\)")
_SELECTION_SEP = re.compile(r"\s*(?:,|;|&|\band\b|\\text\{\s*and\s*\})\s*", re.I)


def parse_options(value: Any) -> list[str] | None:
    """Options as a list of strings: a list, or a string holding a Python/JSON list (MMMU's ``options``)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ValueError(f"options {value[:60]!r} is not a list") from None
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"options must be a non-empty list, got {type(value).__name__}")
    if len(value) > len(LETTERS):
        raise ValueError(f"{len(value)} options: the choice grader names options A-Z, at most {len(LETTERS)}")
    return [str(v) for v in value]


def choice_gold(answer: str, options: Sequence[str] | None) -> str:
    """The gold string the choice grader receives: the bare answer, or a JSON payload with the options."""
    if not options:
        return str(answer)
    return json.dumps({"answer": str(answer), "options": list(options)}, ensure_ascii=False)


def _normalise(text: str) -> str:
    return " ".join(text.replace("$", "").split()).strip().rstrip(".").strip().casefold()


def _unwrap(text: str) -> str:
    text = text.strip().strip("*").strip()
    if text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    while (m := _WRAPPER.match(text)) is not None:
        text = m.group(1).strip()
    return text


def _decode_gold(gold: str) -> tuple[str, list[str] | None]:
    if gold.lstrip().startswith("{"):
        try:
            payload = json.loads(gold)
        except json.JSONDecodeError:
            payload = None
        if isinstance(payload, dict) and "answer" in payload:
            return str(payload["answer"]), parse_options(payload.get("options"))
    return gold, None


def _valid_letter(letter: str, options: Sequence[str] | None) -> str | None:
    limit = len(options) if options else len(LETTERS)
    return letter if letter in LETTERS[:limit] else None


def read_choice(text: str, options: Sequence[str] | None, *, whole_line: bool = False) -> str | None:
    """The letter a short answer text names, or None: a letter form, or an option's exact text."""
    text = _unwrap(text)
    if (m := _LETTER_ONLY.match(text)) is not None:
        return _valid_letter(m.group(1), options)
    if (m := _LETTER_THEN_TEXT.match(text)) is not None:
        letter = _valid_letter(m.group(1), options)
        if letter is None or {p.group(1) for p in _PAREN_LETTER.finditer(m.group(2))} - {letter}:
            return None  # "(A) then (B)" names two letters
        if not options:
            return letter
        named = _option_letter(m.group(2), options)  # "B. 12" must not name another option's text
        return letter if named in (None, letter) else None
    if options and (letter := _option_letter(text, options)) is not None:
        return letter
    if whole_line:
        found = {m.group(1) for m in _PAREN_LETTER.finditer(text)}
        if len(found) == 1:
            return _valid_letter(found.pop(), options)
    return None


def _option_letter(text: str, options: Sequence[str]) -> str | None:
    wanted = _normalise(_unwrap(text))
    hits = [i for i, opt in enumerate(options) if _normalise(opt) == wanted]
    return LETTERS[hits[0]] if len(hits) == 1 else None


def extract_choice(response: str | None, options: Sequence[str] | None = None, *, reader=None) -> str | None:
    """The response's final option letter (module doc: boxed, then ``Answer:``, then the last line);
    ``reader`` (default :func:`read_choice`) reads the letter out of the text found there."""
    if not response or not response.strip():
        return None
    if "\\boxed" in response or "\\fbox" in response:
        boxed = extract_boxed(response)
        if boxed is None:
            return None
        return reader(boxed, options) if reader else read_choice(boxed, options)
    answers = _ANSWER.findall(response)
    last = answers[-1] if answers else [line for line in response.strip().splitlines() if line.strip()][-1]
    return reader(last, options) if reader else read_choice(last, options, whole_line=True)


def read_choices(text: str, options: Sequence[str] | None) -> str | None:
    """The letters a multi-select answer names (``A, C``, ``A and C``, ``(A), (C)``), sorted and joined
    by ``", "``; one letter as itself. None when any part names no option, or when they are joined by
    "or" (a hedge, not a selection)."""
    text = _unwrap(text)
    if re.search(r"(?<![A-Za-z])or(?![A-Za-z])", text, re.I):
        return None
    parts = [p for p in _SELECTION_SEP.split(text) if p.strip()]
    letters = [read_choice(p, options) for p in parts]
    if not letters or None in letters or len(set(letters)) != len(letters):
        return None
    return ", ".join(sorted(letters))  # type: ignore[arg-type]


def _multi(options) -> bool:
    return bool(options is not None and options.multi_select)


def gold_letter(gold: str, options=None) -> str:
    """The gold option letter of a grader gold string (with ``multi_select``: its letters, sorted and
    joined, ``"A, C"``); raises ValueError when it names no option."""
    answer, choices = _decode_gold(gold)
    letter = read_choice(answer, choices)
    if letter is None and _multi(options):
        letter = read_choices(answer, choices)
    if letter is None:
        what = "option letters" if _multi(options) else "an option letter"
        raise ValueError(f"choice: gold answer {answer!r} is neither {what} nor an option's text")
    return letter


def gold_problem(answer: str, options_value: Any, *, per_row: bool = False, grading=None) -> str | None:
    """Why a record's gold cannot be graded by a choice grader (its options unreadable, or a gold that
    names no option), or None; ``per_row``: a record without options is graded as math (no check)."""
    try:
        options = parse_options(options_value)
    except ValueError as exc:
        return str(exc)
    if per_row and not options:
        return None
    try:
        gold_letter(choice_gold(answer, options), grading)
    except ValueError as exc:
        return str(exc)
    return None


def extract_for_gold(gold: str, response: str | None, options=None) -> str | None:
    """Pool extractor: the final letter of ``response`` (with ``multi_select``, its letters), reading
    option texts from ``gold``'s payload."""
    choices = _decode_gold(gold)[1]
    if not _multi(options):
        return extract_choice(response, choices)
    return extract_choice(response, choices, reader=read_choices)


def choice_grade(gold: str, letter: str, options=None) -> str:
    """Grade an extracted letter against the gold (letter, option text, or payload with options); with
    ``multi_select`` the extracted letters must be exactly the gold's."""
    return CORRECT if letter.strip() == gold_letter(gold, options) else INCORRECT
