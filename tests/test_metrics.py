"""Metrics against hand-computed values."""

from __future__ import annotations

import math

import pytest

from ares_cli.errors import UsageError
from ares_cli.scoring.metrics import (
    ProblemSamples,
    breakdown,
    group_samples,
    majority_correct,
    pass_at_k,
    pass_k_values,
    standard_error,
    summarize,
)


def test_pass_at_k_hand_values():
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 0, 5) == 0.0  # c = 0
    assert pass_at_k(5, 5, 1) == 1.0 and pass_at_k(5, 5, 3) == 1.0  # c = n
    assert pass_at_k(5, 1, 5) == 1.0  # k = n with one success
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 3, 4) == pytest.approx(1 - 35 / 210)  # 1 - C(7,4)/C(10,4)
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)


def test_pass_at_k_matches_binomial_formula():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
    assert 0.0 < pass_at_k(1000, 1, 1) < pass_at_k(1000, 1, 500) < 1.0  # large n, no overflow


def test_pass_at_k_rejects_bad_arguments():
    with pytest.raises(UsageError):
        pass_at_k(4, 2, 5)
    with pytest.raises(UsageError):
        pass_at_k(4, 5, 1)
    with pytest.raises(UsageError):
        pass_at_k(4, 1, 0)


def test_pass_k_values():
    assert pass_k_values(8) == [1, 2, 4, 8]
    assert pass_k_values(6) == [1, 2, 4, 6]
    assert pass_k_values(1) == [1]


def test_majority_vote_rules():
    assert majority_correct([0, 1, 1, 0, 1], [False, True, True, False, True]) is True
    assert majority_correct([0, 1, 1, 0], [True, False, False, True]) is True  # tie: class 0 came first
    assert majority_correct([1, 0, 0, 1], [False, True, True, False]) is False  # tie: class 1 came first
    assert majority_correct([-1, None, -1], [False, False, False]) is False  # all invalid abstain
    assert majority_correct([-1, -1, 2], [False, False, True]) is True  # abstainers do not vote
    with pytest.raises(UsageError):
        majority_correct([0], [True, False])


def test_standard_error_ddof1():
    assert standard_error([0.5, 0.0]) == pytest.approx(0.25)  # std(ddof=1)=0.3536, /sqrt(2)
    assert math.isnan(standard_error([1.0]))


def _problems() -> list[ProblemSamples]:
    return [
        ProblemSamples(
            "p1",
            ["correct", "incorrect", "correct", "invalid"],
            n_tokens=[10, 20, 30, 100],
            finish_reasons=["stop", "stop", "stop", "length"],
            classes=[0, 1, 0, -1],
            groups={"difficulty": 1, "source": "a"},
        ),
        ProblemSamples(
            "p2",
            ["incorrect", "incorrect", "incorrect", "timeout"],
            n_tokens=[5, 5, 5, 5],
            finish_reasons=["stop"] * 4,
            classes=[0, 1, 1, 0],
            groups={"difficulty": 10, "source": "b"},
        ),
    ]


def test_summarize_hand_computed():
    m = summarize(_problems())
    assert m["k"] == 4 and m["n_problems"] == 2 and m["n_samples"] == 8
    assert m["avg@4"] == pytest.approx(0.25) and m["avg@4_se"] == pytest.approx(0.25)
    assert m["maj@4"] == pytest.approx(0.5)  # p1: class 0 wins (correct); p2: tie -> class 0 (incorrect)
    assert m["pass@1"] == pytest.approx(0.25)
    assert m["pass@2"] == pytest.approx((5 / 6) / 2)  # p1: 1 - C(2,2)/C(4,2)
    assert m["pass@4"] == pytest.approx(0.5) and m["pass@4_se"] == pytest.approx(0.5)
    assert m["len_mean"] == pytest.approx(180 / 8) and m["len_median"] == pytest.approx(7.5)
    assert m["truncation_rate"] == pytest.approx(1 / 8)
    assert m["invalid_rate"] == pytest.approx(1 / 8) and m["timeout_rate"] == pytest.approx(1 / 8)
    assert set(m) >= {"avg@4_se", "maj@4_se", "pass@1_se", "pass@2_se", "error_rate"}


def test_summarize_with_smaller_k_and_without_votes():
    m = summarize(_problems(), k=2)
    assert m["avg@2"] == pytest.approx(0.25) and "pass@4" not in m and "pass@2" in m
    assert m["maj@2"] == pytest.approx(0.5)  # p1 first two: tie 0/1 -> class 0 correct; p2 tie -> incorrect
    no_votes = [ProblemSamples("p", ["correct", "incorrect"])]
    assert "maj@2" not in summarize(no_votes)
    with pytest.raises(UsageError):
        summarize(_problems(), k=5)
    with pytest.raises(UsageError):
        summarize([])


def test_breakdown_and_group_samples():
    by = breakdown(_problems(), "difficulty")
    assert list(by) == ["1", "10"]  # numeric order, not string order
    assert by["1"]["avg@4"] == pytest.approx(0.5) and by["10"]["avg@4"] == 0.0
    assert math.isnan(by["1"]["avg@4_se"])
    records = [
        {"problem_id": "q", "sample_idx": 1, "grade": "incorrect", "n_tokens": 4, "finish_reason": "length"},
        {"problem_id": "q", "sample_idx": 0, "grade": "correct", "n_tokens": 2, "finish_reason": "stop"},
    ]
    (q,) = group_samples(records, groups={"q": {"source": "toy"}}, classes={"q": [0, 1]})
    assert q.grades == ["correct", "incorrect"] and q.classes == [0, 1] and q.groups == {"source": "toy"}
    m = summarize([q])
    assert m["maj@2"] == 1.0 and m["truncation_rate"] == 0.5 and m["len_mean"] == 3.0
