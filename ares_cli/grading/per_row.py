"""``choice_or_math``: a per-row grader choice for benchmarks that mix multiple-choice and free-form rows
(MathVista, MATH-Vision, MMMU): a record with options (``meta.options``) is graded by the choice rules,
any other by the math rules.

On a choice row the response's final choice is read as the ``choice`` grader reads it (a letter, or an
option's exact text; the gold may be the letter or the option's text, so ``\\boxed{C}`` is correct for the
gold "145°" when option C is 145°, as the benchmarks' own scorers map letter to text). An answer that is
neither (``\\boxed{145^\\circ}``) is compared with every option by the math rules and names the option it
equals when it equals exactly one. A free-form row is graded by :func:`~ares_cli.grading.math_grader.
math_grade` with the benchmark's answer forms and options.
"""

from __future__ import annotations

from ares_cli.grading.choice import LETTERS, _decode_gold, choice_grade, extract_for_gold, gold_letter
from ares_cli.grading.final_answers import DEFAULT_FORMS, extract_final, final_answers, join_answers
from ares_cli.grading.graders import CORRECT, INCORRECT

__all__ = ["choice_or_math_grade", "extract_choice_or_math"]


def _is_selection(answer: str, n_options: int) -> bool:
    """Whether an extracted answer is a letter (or, multi-select, letters) among the options'."""
    parts = [p.strip() for p in answer.split(",")]
    return all(len(p) == 1 and p in LETTERS[:n_options] for p in parts)


def extract_choice_or_math(gold: str, response: str | None, options=None) -> str | None:
    """Pool extractor: on a choice row the final letter, else the final answer itself (for the options'
    math comparison); on a free-form row the math grader's final answer(s)."""
    _, choices = _decode_gold(gold)
    if not choices:
        return extract_final(gold, response, options)
    letter = extract_for_gold(gold, response, options)
    if letter is not None:
        return letter
    forms = options.forms(DEFAULT_FORMS) if options is not None else DEFAULT_FORMS
    return join_answers(final_answers(response, forms))


def choice_or_math_grade(gold: str, answer: str, options=None) -> str:
    """A choice row by its letter (or the one option its value equals), a free-form row by the math rules."""
    from ares_cli.grading.math_grader import graded, math_grade

    _, choices = _decode_gold(gold)
    if not choices:
        return math_grade(gold, answer, options)
    if _is_selection(answer, len(choices)):
        return choice_grade(gold, answer, options)
    matches = [i for i, option in enumerate(choices) if graded(option, answer) == CORRECT]
    if len(matches) != 1:
        return INCORRECT
    return CORRECT if LETTERS[matches[0]] == gold_letter(gold, options) else INCORRECT
