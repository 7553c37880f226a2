"""The final answers a response states, in the answer forms its benchmark declares (no sympy: this runs in
the grading pool's parent process, before the workers compare).

Forms (:data:`~ares_cli.grading.options.ANSWER_FORMS`):

- ``boxed``: every top-level ``\\boxed{}``/``\\fbox{}`` with something in it (an empty one, a quoted
  instruction's ``\\boxed{}``, or a placeholder the problem itself draws, ``\\boxed{\\phantom{2}}``,
  ``\\boxed{\\quad}``, ``\\boxed{?}``, is skipped); an unbalanced last box states nothing readable.
- ``answer_line``: a final ``Answer: ...`` line (DAPO's and Minerva's instruction: "the last line of your
  response should be of the form Answer: $Answer"), written ``Answer: 34``, ``Answer: $34$``,
  ``**Answer:** 34``, ``**Answer: 34**``, ``$\\text{Answer: } 7$``, ``Final Answer: 34``. It counts only
  when the response's last non-empty line is one; every earlier ``Answer:`` line then counts too (two
  that disagree are two final answers).
- ``answer_phrase``: the text after the last "The final answer is" / "The answer is:" / "The answer is"
  up to the end of its line, without a final period (BBEH's extraction).

A response that states several different final answers (boxes that disagree, a box and an ``Answer:`` line
that disagree, a hedge over two boxes) is handed to the grader as all of them, each boxed, in order:
``\\boxed{3} \\boxed{4}`` (:func:`several_answers` reads it back); the grader decides (the math grader:
wrong unless the gold is the set of them, :func:`~ares_cli.grading.math_grader.verdict`). The same answer
stated twice is one answer.
"""

from __future__ import annotations

import re

from ares_cli.grading.answer_forms import plain_text, strip_delimiters
from ares_cli.grading.extract import boxed_groups, boxed_spans

__all__ = [
    "answer_lines",
    "answer_phrase",
    "extract_final",
    "final_answers",
    "join_answers",
    "several_answers",
]

DEFAULT_FORMS = ("boxed",)
_ANSWER_LINE = re.compile(
    r"^\s*(?:[*_#>]+\s*)?(?P<dollar>\$\s*)?(?:\\text(?:bf|rm)?\s*\{\s*)?(?:final\s+)?answer\s*(?:[*_]+\s*)?"
    r"[:：]\s*(?:\}\s*)?(?:[*_]+\s*)?(?P<rest>.*?)\s*$",
    re.I,
)
_PHRASE = re.compile(r"the\s+(?:final\s+)?answer\s+is\s*:?", re.I)
_EMPHASIS = "*_ "
_INVISIBLE = re.compile(
    r"\\[hv]?phantom\s*\{[^{}]*\}|\\(?:square|Box|blacksquare|qquad|quad|,|;|:|!| )|[\s~?.]|\\ldots|\\dots"
)


def _unwrap_answer(text: str, dollar: bool) -> str:
    text = text.strip().strip(_EMPHASIS).strip()
    if dollar and text.endswith("$") and text.count("$") % 2 == 1:
        text = text[:-1].strip()
    text = strip_delimiters(text).rstrip(".").strip()
    spans = boxed_spans(text)
    if len(spans) == 1 and spans[0] is not None and _only_boxes(text):
        text = spans[0].strip()
    return text


def answer_lines(response: str) -> list[str]:
    """The answers of the ``Answer:`` lines when the last non-empty line is one ([] otherwise)."""
    lines = [line for line in response.splitlines() if line.strip()]
    if not lines or _ANSWER_LINE.match(lines[-1]) is None:
        return []
    found = []
    for line in lines:
        m = _ANSWER_LINE.match(line)
        if m is not None and (answer := _unwrap_answer(m["rest"], bool(m["dollar"]))):
            found.append(answer)
    return found


def answer_phrase(response: str) -> str | None:
    """The text after the last "The (final) answer is", to the end of its line (BBEH's extraction)."""
    found = list(_PHRASE.finditer(response))
    if not found:
        return None
    last = found[-1]
    rest = response[last.end() :].split("\n", 1)[0]
    return _unwrap_answer(rest, rest.strip().startswith("$")) or None


def _boxes(response: str) -> list[tuple[int, str]] | None:
    """(position, content) of every non-empty top-level box; None when the last box is unbalanced."""
    groups = boxed_groups(response)
    if groups and groups[-1][2] is None:
        return None
    return [(start, c.strip()) for start, _, c in groups if c and _INVISIBLE.sub("", c).strip()]


def final_answers(response: str | None, forms: tuple[str, ...] = DEFAULT_FORMS) -> list[str]:
    """The distinct final answers ``response`` states in ``forms``, in the order of their last statement."""
    if not response:
        return []
    stated: list[tuple[int, str]] = []
    if "boxed" in forms:
        boxes = _boxes(response)
        if boxes is None:
            return []
        stated += boxes
    if "answer_line" in forms:
        end = len(response)
        stated += [(end, a) for a in answer_lines(response)]
    if "answer_phrase" in forms and (phrase := answer_phrase(response)) is not None:
        stated.append((len(response), phrase))
    last: dict[str, tuple[int, int, str]] = {}
    for order, (pos, answer) in enumerate(stated):
        last[plain_text(answer)] = (pos, order, answer)
    return [answer for _, _, answer in sorted(last.values())]


def join_answers(answers: list[str]) -> str | None:
    """One answer as itself, several as ``\\boxed{a} \\boxed{b}`` (what the graders read back), none as None."""
    if not answers:
        return None
    if len(answers) == 1:
        return answers[0]
    return " ".join(f"\\boxed{{{a}}}" for a in answers)


def _only_boxes(text: str) -> bool:
    """Whether ``text`` is nothing but top-level boxes (each balanced) and white space."""
    groups, pos, rest = boxed_groups(text), 0, []
    for start, end, content in groups:
        if content is None:
            return False
        rest.append(text[pos:start])
        pos = end
    rest.append(text[pos:])
    return bool(groups) and not "".join(rest).strip()


def several_answers(answer: str) -> list[str] | None:
    """The answers of a joined ``\\boxed{a} \\boxed{b}`` (two or more boxes and nothing else); else None."""
    if "\\boxed" not in answer and "\\fbox" not in answer:
        return None
    spans = boxed_spans(answer)
    if len(spans) < 2 or None in spans or not _only_boxes(answer):
        return None
    return [s.strip() for s in spans if s and s.strip()]


def extract_final(gold: str, response: str | None, options=None) -> str | None:  # noqa: ARG001
    """Pool extractor of the math grader: the response's final answer(s) in its benchmark's answer forms
    (``options``: :class:`~ares_cli.grading.options.GradingOptions`; default the boxed form)."""
    forms = options.forms(DEFAULT_FORMS) if options is not None else DEFAULT_FORMS
    return join_answers(final_answers(response, forms))
