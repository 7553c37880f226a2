"""The multiple-choice grader on a hand-checked table of response forms, and through the grading pool."""

from __future__ import annotations

import pytest

from ares_cli.grading import GradingPool, resolve_grader
from ares_cli.grading.choice import (
    choice_gold,
    choice_grade,
    extract_choice,
    extract_for_gold,
    gold_letter,
    parse_options,
)

OPTIONS = ["2", "12", "The area doubles", "The area doubles and the perimeter halves"]

# (response, options or None, expected letter or None=invalid); each row checked by hand.
TABLE = [
    (r"The answer is \boxed{B}.", None, "B"),
    (r"\boxed{(C)}", None, "C"),
    (r"Therefore \boxed{\text{(D)}}", None, "D"),
    (r"\boxed{\text{A}}", None, "A"),
    (r"So \boxed{B. 12}", OPTIONS, "B"),
    (r"\boxed{12}", OPTIONS, "B"),  # option text; "12" contains option A's "2" but must not match it
    (r"\boxed{2}", OPTIONS, "A"),
    (r"\boxed{The area doubles}", OPTIONS, "C"),
    (r"\boxed{The area doubles and the perimeter halves}", OPTIONS, "D"),  # contains option C's text
    (r"\boxed{ the area  DOUBLES. }", OPTIONS, "C"),  # whitespace, case and a final period normalised
    (r"\boxed{$12$}", OPTIONS, "B"),
    (r"\boxed{A, B}", None, None),  # two letters
    (r"\boxed{A or B}", None, None),
    (r"\boxed{42}", OPTIONS, None),  # a box around a non-option
    (r"\boxed{E}", OPTIONS, None),  # only four options
    (r"\boxed{B. 2}", OPTIONS, None),  # letter and another option's text disagree
    (r"First (A) looks right, but \boxed{C}", None, "C"),  # the box wins over earlier letters
    ("Answer: B", None, "B"),
    ("answer: (d)", None, None),  # lower-case letters are not choices
    ("Reasoning...\nThe answer is: C.", None, "C"),
    ("Answer: The area doubles", OPTIONS, "C"),
    ("Answer: A careful check shows B", None, None),  # a letter inside a sentence
    ("Answer: A or B", None, None),  # two letters
    ("Answer: (A) then (B)", None, None),
    ("Lots of work.\n(B)", None, "B"),
    ("Lots of work.\nB.", None, "B"),
    ("Lots of work.\n\\text{(C)}", None, "C"),
    ("Lots of work.\nD) The area doubles and the perimeter halves", OPTIONS, "D"),
    ("Work.\nSo the correct option is (A).", None, "A"),
    ("Work.\nIt is (A) or (B).", None, None),  # two letters on the conclusion line
    ("Work.\nThe area doubles", OPTIONS, "C"),
    ("A quick sketch shows the area doubles.", OPTIONS, None),  # "A" as a word, not a choice
    ("I think it is B", None, None),  # a bare letter inside a sentence
    ("Option (B) is wrong.\nWe conclude nothing.", None, None),  # the last line names no choice
    ("", None, None),
    (r"\boxed{}", None, None),
    ("**B**", None, "B"),
    ("Answer: **C**", None, "C"),
]


@pytest.mark.parametrize(("response", "options", "expected"), TABLE)
def test_choice_table(response, options, expected):
    assert extract_choice(response, options) == expected


def test_table_is_large_and_has_distractors():
    assert len(TABLE) >= 30
    assert sum(1 for _, _, e in TABLE if e is None) >= 10


def test_gold_as_letter_or_option_text():
    assert gold_letter("B") == "B"
    assert gold_letter(choice_gold("12", OPTIONS)) == "B"
    assert gold_letter(choice_gold("The area doubles", OPTIONS)) == "C"
    assert gold_letter(choice_gold("(D)", OPTIONS)) == "D"
    with pytest.raises(ValueError, match="neither an option letter"):
        gold_letter(choice_gold("7", OPTIONS))
    assert choice_grade(choice_gold("12", OPTIONS), "B") == "correct"
    assert choice_grade("B", "C") == "incorrect"
    assert extract_for_gold(choice_gold("12", OPTIONS), r"\boxed{12}") == "B"


def test_parse_options_accepts_mmmu_string_lists():
    assert parse_options("['1', 'x + 1']") == ["1", "x + 1"]
    assert parse_options(["a", 2]) == ["a", "2"]
    assert parse_options(None) is None
    with pytest.raises(ValueError, match="not a list"):
        parse_options("A. one B. two")
    with pytest.raises(ValueError, match="non-empty"):
        parse_options([])


def test_registry_names_choice_and_math_alias():
    assert resolve_grader("choice").with_options
    assert resolve_grader("math").name == "math_verify"


def test_pool_grades_choices_and_votes_by_letter():
    problem = {"id": "p", "answer": "12", "meta": {"options": OPTIONS}}
    with GradingPool("choice", workers=1, timeout_s=10.0) as pool:
        gold = pool.gold_for(problem)
        responses = [r"\boxed{B}", r"\boxed{12}", "Answer: A", "no idea", r"\boxed{(B)}"]
        results = pool.grade([(gold, r) for r in responses])
        assert [r.grade for r in results] == ["correct", "correct", "incorrect", "invalid", "correct"]
        assert [r.extracted for r in results] == ["B", "B", "A", None, "B"]
        assert pool.equivalence_classes([r.extracted for r in results]) == [0, 0, 1, -1, 0]
