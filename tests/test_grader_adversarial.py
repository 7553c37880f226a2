"""The hand-labelled adversarial set (``tests/data/grader_adversarial.jsonl``), graded through the grading
pool, the entry point ``ares rl``, ``ares eval`` and ``ares passrate`` use (the record's gold through
``pool.gold_for``, the full response through the pool's extraction).

Each case names its class (the false-accept classes of the grader's rules and the usual answer forms), the
grader reference it is graded with (a manifest's grading options included), the gold, the response, its
label by the MATH / Omni-MATH convention (``true``: a correct answer) and the reason for the label.
``expect: judge`` marks a correct answer no rule can decide (prose, no box): ``math`` grades it incorrect
and ``math+judge`` hands it to the judge. ``benchmarks/bench_grader_real.py`` counts the set by class,
beside raw math-verify."""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from ares_cli.grading import GradingPool
from ares_cli.grading.judge import parse_judge_grader, rules_spec

logging.getLogger("math_verify").setLevel(logging.ERROR)

DATA = Path(__file__).parent / "data" / "grader_adversarial.jsonl"
CASES = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
ISSUE_CLASSES = {
    "matrix row break", "hedge across boxes", "percent", "bound without left side", "chain of equalities",
    "spaced thousands", "repeating decimal", "option label", "set in words", "answer label in the box",
    "inequality vs interval", "no box", "answer line (DAPO)", "tolerance (DynaMath)", "BBEH normalisation",
    "any-of golds (MMMU)", "multi-select", "choice or math", "injection in the answer",
}  # fmt: skip


def problem_of(case: dict) -> dict:
    meta = {"options": case["options"]} if "options" in case else {}
    return {"id": case["id"], "problem": "?", "answer": case["gold"], "meta": meta}


@pytest.fixture(scope="module")
def grades() -> dict[str, str]:
    by_grader = defaultdict(list)
    for case in CASES:
        by_grader[case["grader"]].append(case)
    out = {}
    for grader, cases in by_grader.items():
        with GradingPool(grader, workers=2, timeout_s=30) as pool:
            results = pool.grade([(pool.gold_for(problem_of(c)), c["response"]) for c in cases])
        out |= {c["id"]: r.grade for c, r in zip(cases, results, strict=True)}
    return out


def test_the_set_is_hand_labelled_with_reasons():
    assert len(CASES) >= 200 and len({c["id"] for c in CASES}) == len(CASES)
    for c in CASES:
        assert isinstance(c["label"], bool) and c["reason"].strip() and c["class"].strip(), c["id"]
        assert c.get("expect") in (None, "judge") and (c.get("expect") is None or c["label"]), c["id"]
    classes = Counter(c["class"] for c in CASES)
    assert ISSUE_CLASSES <= set(classes), ISSUE_CLASSES - set(classes)
    assert sum(not c["label"] for c in CASES) >= 100, "at least as many negatives as an acceptance path needs"
    for cls in classes:  # every class has both a correct and a wrong answer beside each other
        labels = {c["label"] for c in CASES if c["class"] == cls}
        assert labels == {True, False}, cls


def test_no_false_accepts(grades):
    accepted = [
        (c["id"], c["class"], c["response"]) for c in CASES if not c["label"] and grades[c["id"]] == "correct"
    ]
    assert not accepted, accepted


def test_every_correct_answer_the_rules_can_read_is_accepted(grades):
    rejected = [
        (c["id"], c["class"], c["response"], grades[c["id"]])
        for c in CASES
        if c["label"] and c.get("expect") != "judge" and grades[c["id"]] != "correct"
    ]
    assert not rejected, rejected


def test_what_no_rule_can_read_goes_to_the_judge(grades):
    judged = [c for c in CASES if c.get("expect") == "judge"]
    assert judged and all(grades[c["id"]] != "correct" for c in judged)
    with GradingPool(rules_spec(parse_judge_grader("math+judge")), workers=1, timeout_s=30) as pool:
        results = pool.grade([(pool.gold_for(problem_of(c)), c["response"]) for c in judged])
    assert [r.grade for r in results] == ["invalid"] * len(judged)
