"""Held-out check: pass@k, avg@K and their standard errors against an independent implementation.

The reference is written differently from ``ares_cli.scoring.metrics``: pass@k by exact enumeration of every
k-subset of the samples (``itertools.combinations``) and by the closed form 1 - C(n-c, k)/C(n, k) on
integers (the estimator lighteval and the Codex paper use), both in exact ``Fraction`` arithmetic; the
standard error from the exact sample variance. They must agree with the library to 1e-12.
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest

from ares_cli.scoring import metrics


def pass_at_k_enumerated(outcomes: list[bool], k: int) -> Fraction:
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    hits = sum(1 for s in subsets if any(outcomes[i] for i in s))
    return Fraction(hits, len(subsets))


def pass_at_k_comb(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def exact_mean_and_se(scores: list[Fraction]) -> tuple[Fraction, float]:
    n = len(scores)
    mean = sum(scores, Fraction(0)) / n
    variance = sum(((s - mean) ** 2 for s in scores), Fraction(0)) / (n - 1)
    return mean, math.sqrt(variance / n)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pass_avg_and_se_agree_with_exact_enumeration(seed):
    rng = random.Random(seed)
    n_samples = 10
    outcomes = []
    for _ in range(25):
        p = rng.random()
        outcomes.append([rng.random() < p for _ in range(n_samples)])
    samples = [
        {"problem_id": f"p{i}", "sample_idx": j, "grade": "correct" if ok else "incorrect"}
        for i, row in enumerate(outcomes)
        for j, ok in enumerate(row)
    ]
    got = metrics.summarize(metrics.group_samples(samples), k=n_samples)
    for k in metrics.pass_k_values(n_samples):
        per_problem = [pass_at_k_enumerated(row, k) for row in outcomes]
        assert per_problem == [pass_at_k_comb(n_samples, sum(row), k) for row in outcomes]
        mean, se = exact_mean_and_se(per_problem)
        assert abs(got[f"pass@{k}"] - float(mean)) < 1e-12
        assert abs(got[f"pass@{k}_se"] - se) < 1e-12
    avg = [Fraction(sum(row), n_samples) for row in outcomes]
    mean, se = exact_mean_and_se(avg)
    assert abs(got[f"avg@{n_samples}"] - float(mean)) < 1e-12
    assert abs(got[f"avg@{n_samples}_se"] - se) < 1e-12


def test_avg_at_k_uses_the_first_k_samples():
    rows = [[True, False, False, True], [False, False, True, True], [True, True, True, False]]
    samples = [
        {"problem_id": f"p{i}", "sample_idx": j, "grade": "correct" if ok else "incorrect"}
        for i, row in enumerate(rows)
        for j, ok in enumerate(row)
    ]
    got = metrics.summarize(metrics.group_samples(samples), k=2)
    mean, se = exact_mean_and_se([Fraction(sum(r[:2]), 2) for r in rows])
    assert abs(got["avg@2"] - float(mean)) < 1e-12 and abs(got["avg@2_se"] - se) < 1e-12
    # pass@k still uses all n samples (unbiased estimator)
    mean, _ = exact_mean_and_se([pass_at_k_enumerated(r, 2) for r in rows])
    assert abs(got["pass@2"] - float(mean)) < 1e-12
