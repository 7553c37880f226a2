"""Benchmark aggregations on hand-made fixtures: DynaMath worst case, We-Math strict score, the
MathVerse vision-only subset; and the exact-match text grader used by BBEH."""

from __future__ import annotations

import math

import pytest

from ares_cli.data.loader import _Table, select_rows
from ares_cli.grading.text import exact_match_grade, final_answer
from ares_cli.scoring.benchmark_scores import aggregate, check_spec, wemath_outcomes, worst_case


def samples_from(table: dict[str, list[bool]]) -> list[dict]:
    return [
        {"problem_id": pid, "sample_idx": j, "grade": "correct" if ok else "incorrect"}
        for pid, row in table.items()
        for j, ok in enumerate(row)
    ]


def test_dynamath_worst_case_over_variants():
    # seed q1: variants a, b; seed q2: variant c only
    correct = {"a": [True, True, False], "b": [True, False, False], "c": [True, True, True]}
    problems = [
        {"id": "a", "meta": {"qid": 1}},
        {"id": "b", "meta": {"qid": 1}},
        {"id": "c", "meta": {"qid": 2}},
    ]
    # q1: sample 0 both right, 1 and 2 not -> 1/3; q2 -> 1
    assert worst_case(correct, {"a": "1", "b": "1", "c": "2"}, 3) == [1 / 3, 1.0]
    out = aggregate({"kind": "worst_case", "group": "qid"}, problems, samples_from(correct), 3)
    assert out["score"] == pytest.approx((1 / 3 + 1) / 2) and out["n_groups"] == 2
    assert out["score_se"] == pytest.approx(math.sqrt(((1 / 3 - 2 / 3) ** 2 * 2) / 1) / math.sqrt(2))
    # K = 1 uses only the first sample: both seeds solved
    assert (
        aggregate({"kind": "worst_case", "group": "qid"}, problems, samples_from(correct), 1)["score"] == 1.0
    )


def test_wemath_strict_categories_and_score():
    steps = {"p1": "2steps_1", "p2": "2steps_2", "m": "2steps_multi",  # composite A
             "q1": "2steps_1", "q2": "2steps_2", "n": "2steps_multi",  # composite B
             "s": "1steps"}  # fmt: skip
    group = {"p1": "A", "p2": "A", "m": "A", "q1": "B", "q2": "B", "n": "B", "s": "C"}
    correct = {
        "p1": [True, True, False, False], "p2": [True, True, True, False], "m": [True, False, True, False],
        "q1": [True, True, True, True], "q2": [True, True, True, True], "n": [True, True, True, False],
        "s": [False, False, False, False],
    }  # fmt: skip
    scores, counts = wemath_outcomes(correct, group, steps, 4)
    # A: CM, IG, RM, IK -> (1 + 0.5 + 0 + 0) / 4; B: CM, CM, CM, IG -> 3.5 / 4; "1steps" is not a composite
    assert scores == [1.5 / 4, 3.5 / 4]
    assert counts == {"CM": 4, "IG": 2, "RM": 1, "IK": 1}
    # the strict-score formula (N - 0.5 IG - RM - IK) / N over the 8 composite outcomes
    n = sum(counts.values())
    assert sum(scores) / 2 == pytest.approx((n - 0.5 * counts["IG"] - counts["RM"] - counts["IK"]) / n)
    problems = [{"id": pid, "meta": {"g": group[pid], "k": steps[pid]}} for pid in steps]
    out = aggregate({"kind": "wemath_strict", "group": "g", "step": "k"}, problems, samples_from(correct), 4)
    assert out["score"] == pytest.approx(2.5 / 4) and out["counts"] == counts


def test_wemath_composite_without_parts_is_an_error():
    with pytest.raises(ValueError, match="no one-step parts"):
        wemath_outcomes({"m": [True]}, {"m": "A"}, {"m": "2steps_multi"}, 1)


def test_aggregate_spec_validation():
    check_spec({"kind": "worst_case", "group": "qid"})
    for bad in ({"kind": "mean"}, {"kind": "worst_case"}, {"kind": "worst_case", "group": "q", "x": 1}, []):
        with pytest.raises(ValueError):
            check_spec(bad)


def test_mathverse_vision_only_subset_and_regex_subset():
    rows = [
        {"problem_version": v, "n": i}
        for i, v in enumerate(["Text Dominant", "Vision Only", "Text Lite", "Vision Only", "Vision Dominant"])
    ]
    table = _Table(rows, [("f", i + 1) for i in range(len(rows))])
    kept = select_rows(table, {"problem_version": "Vision Only"})
    assert [r["n"] for r in kept.rows] == [1, 3] and kept.locations == [("f", 2), ("f", 4)]
    urls = _Table(
        [{"url": "x/2022_AIME_I"}, {"url": "x/2023_AIME_II"}, {"url": None}], [("f", 1), ("f", 2), ("f", 3)]
    )
    assert select_rows(urls, {"url": {"regex": "2023_AIME"}}).rows == [{"url": "x/2023_AIME_II"}]


@pytest.mark.parametrize(
    ("gold", "response", "grade"),
    [
        ("yes", "so the answer is: Yes.", "correct"),
        ("(a)", "The answer is: (A)", "correct"),
        ("(a)", r"\boxed{a}", "correct"),
        ("42", "The answer is: 43", "incorrect"),
        ("blue", "I think it is blue", "invalid"),
        ("west", "Answer: **West**", "correct"),
    ],
)
def test_exact_match_grader(gold, response, grade):
    assert exact_match_grade(gold, response) == grade


def test_final_answer_prefers_the_box():
    assert final_answer(r"answer is: 3 ... \boxed{4}") == "4"
