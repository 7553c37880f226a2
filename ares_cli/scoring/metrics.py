"""Evaluation metrics over graded samples (pure functions): pass@k, avg@K, maj@K, standard errors, lengths.

Conventions:
- ``n`` is the number of samples actually graded for a problem (any grade counts; only ``correct`` is a
  success). pass@k uses all ``n`` samples (unbiased estimator, k <= n).
- avg@K and maj@K use the first K samples of each problem (by ``sample_idx``), K = the smallest n unless
  given, so every problem is scored on the same budget.
- Standard errors are the sample standard deviation (``ddof=1``) of per-problem scores divided by sqrt(N);
  undefined (NaN) for fewer than two problems.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ares_cli.errors import UsageError

__all__ = [
    "ABSTAIN", "pass_at_k", "pass_k_values", "majority_correct", "mean", "standard_error", "ProblemSamples",
    "group_samples", "summarize", "breakdown"
]  # fmt: skip

ABSTAIN = -1


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 - C(n-c, k) / C(n, k), as the stable product prod_{i=n-c+1}^{n} (1 - k/i)."""
    if not 0 <= c <= n:
        raise UsageError(f"pass@k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise UsageError(f"pass@k needs 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    prob_all_fail = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_fail *= 1.0 - k / i
    return 1.0 - prob_all_fail


def pass_k_values(k_max: int) -> list[int]:
    """1, 2, 4, ... up to ``k_max``, with ``k_max`` itself always last."""
    ks, k = [], 1
    while k < k_max:
        ks.append(k)
        k *= 2
    return ks + [k_max] if k_max >= 1 else []


def majority_correct(classes: Sequence[int | None], correct: Sequence[bool]) -> bool:
    """Majority vote over answer-class ids; None/negative ids abstain, ties go to the class seen first.

    The winning class is scored by its first sample's correctness. All abstaining -> False.
    """
    if len(classes) != len(correct):
        raise UsageError(f"maj@K: {len(classes)} class ids for {len(correct)} samples")
    counts: dict[int, int] = {}
    first: dict[int, int] = {}
    for i, c in enumerate(classes):
        if c is None or c < 0:
            continue
        counts[c] = counts.get(c, 0) + 1
        first.setdefault(c, i)
    if not counts:
        return False
    winner = max(counts, key=lambda c: (counts[c], -first[c]))
    return bool(correct[first[winner]])


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def standard_error(scores: Sequence[float], ddof: int = 1) -> float:
    """std(scores, ddof) / sqrt(N); NaN when N <= ddof."""
    n = len(scores)
    if n <= ddof:
        return math.nan
    m = mean(scores)
    return math.sqrt(math.fsum((s - m) ** 2 for s in scores) / (n - ddof)) / math.sqrt(n)


@dataclass(frozen=True)
class ProblemSamples:
    """The graded samples of one problem, in sample order.

    ``classes``: answer-class ids from ``GradingPool.equivalence_classes`` (-1 abstains); None when votes
    were not computed (maj@K is then omitted). ``groups``: breakdown keys such as source, difficulty.
    """

    problem_id: str
    grades: Sequence[str]
    n_tokens: Sequence[int] = ()
    finish_reasons: Sequence[str] = ()
    classes: Sequence[int] | None = None
    groups: Mapping[str, object] = field(default_factory=dict)

    @property
    def correct(self) -> list[bool]:
        return [g == "correct" for g in self.grades]


def group_samples(
    samples: Iterable[Mapping],
    groups: Mapping[str, Mapping[str, object]] | None = None,
    classes: Mapping[str, Sequence[int]] | None = None,
) -> list[ProblemSamples]:
    """Build ProblemSamples from sample records (``problem_id, sample_idx, grade, n_tokens, finish_reason``).

    ``classes`` maps problem id to class ids in ``sample_idx`` order (or records may carry ``vote_class``);
    ``groups`` maps problem id to its breakdown keys. Problems keep first-appearance order.
    """
    by_problem: dict[str, list[Mapping]] = {}
    for s in samples:
        by_problem.setdefault(str(s["problem_id"]), []).append(s)
    out = []
    for pid, rows in by_problem.items():
        rows = sorted(rows, key=lambda r: r.get("sample_idx", 0))
        if classes is not None and pid in classes:
            cls: Sequence[int] | None = list(classes[pid])
        elif all("vote_class" in r for r in rows):
            cls = [int(r["vote_class"]) for r in rows]
        else:
            cls = None
        out.append(
            ProblemSamples(
                problem_id=pid,
                grades=[r["grade"] for r in rows],
                n_tokens=[int(r.get("n_tokens", 0)) for r in rows],
                finish_reasons=[str(r.get("finish_reason", "")) for r in rows],
                classes=cls,
                groups=dict((groups or {}).get(pid, {})),
            )
        )
    return out


def _with_se(metrics: dict[str, float], name: str, scores: Sequence[float]) -> None:
    metrics[name] = mean(scores)
    metrics[f"{name}_se"] = standard_error(scores)


def summarize(problems: Sequence[ProblemSamples], k: int | None = None) -> dict[str, float]:
    """avg@K, maj@K (when votes exist), pass@1, 2, 4, ..., K (each with ``_se``), lengths, rates.

    ``K`` defaults to the smallest number of samples of any problem; asking for more is a UsageError.
    """
    if not problems:
        raise UsageError("no problems to summarize")
    n_min = min(len(p.grades) for p in problems)
    k_max = n_min if k is None else k
    if not 1 <= k_max <= n_min:
        raise UsageError(f"K={k_max} needs every problem to have >= K graded samples (smallest: {n_min})")
    metrics: dict[str, float] = {"n_problems": float(len(problems)), "k": float(k_max)}
    _with_se(metrics, f"avg@{k_max}", [sum(p.correct[:k_max]) / k_max for p in problems])
    if all(p.classes is not None for p in problems):
        votes = [float(majority_correct(p.classes[:k_max], p.correct[:k_max])) for p in problems]  # type: ignore[index]
        _with_se(metrics, f"maj@{k_max}", votes)
    for kk in pass_k_values(k_max):
        _with_se(metrics, f"pass@{kk}", [pass_at_k(len(p.grades), sum(p.correct), kk) for p in problems])
    grades = [g for p in problems for g in p.grades]
    metrics["n_samples"] = float(len(grades))
    for g in ("invalid", "timeout", "error"):
        metrics[f"{g}_rate"] = grades.count(g) / len(grades)
    lengths = [n for p in problems for n in p.n_tokens]
    metrics["len_mean"] = mean(lengths)
    metrics["len_median"] = float(statistics.median(lengths)) if lengths else math.nan
    reasons = [r for p in problems for r in p.finish_reasons]
    metrics["truncation_rate"] = reasons.count("length") / len(reasons) if reasons else math.nan
    return metrics


def breakdown(
    problems: Sequence[ProblemSamples], key: str | Callable[[ProblemSamples], object], k: int | None = None
) -> dict[str, dict[str, float]]:
    """``summarize`` per group: ``key`` names a ``groups`` entry (e.g. source, difficulty) or is a function.

    Every group uses the same K (default: the smallest n over all problems) so the metric names match.
    Groups are ordered by value (numbers numerically); problems lacking the key fall in group ``"None"``.
    """
    get = key if callable(key) else (lambda p: p.groups.get(key))
    parts: dict[object, list[ProblemSamples]] = {}
    for p in problems:
        parts.setdefault(get(p), []).append(p)
    k_all = k if k is not None else min((len(p.grades) for p in problems), default=0)

    def order(v: object) -> tuple:
        return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))

    return {str(v): summarize(parts[v], k_all) for v in sorted(parts, key=order)}
