"""Seeded, paired studies over RL runs: the statistics of docs/results.md's mechanism studies.

A study trains every *arm* (a recipe) once per seed from the same model; the baseline arm's run of seed s is
paired with each other arm's run of seed s (same prompts in the same order, same rollout seeds at step 1).
Per run a quantity is reduced to one number (a mean over a window of steps); across seeds the paired
difference arm − baseline is summarised as mean ± standard error (sample standard deviation / √n).
Pure functions over metric rows; reading artifacts is the caller's job.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ares_cli.errors import UsageError


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def mean_se(values: Iterable[float]) -> dict[str, float]:
    """Mean, standard error (sd with n − 1, over √n; NaN for n < 2) and n of ``values``."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return {"mean": math.nan, "se": math.nan, "n": 0}
    mean = sum(xs) / n
    if n < 2:
        return {"mean": mean, "se": math.nan, "n": 1}
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return {"mean": mean, "se": math.sqrt(var / n), "n": n}


def paired(treatment: Mapping[Any, float], baseline: Mapping[Any, float]) -> dict[str, Any]:
    """Paired difference treatment − baseline over the seeds both hold: mean ± SE, n and the per-seed
    differences. A seed present in only one of the two is an error (an unpaired run would bias the mean)."""
    if set(treatment) != set(baseline):
        missing = sorted(set(treatment) ^ set(baseline), key=str)
        raise UsageError(f"paired comparison needs the same seeds on both sides; unpaired: {missing}")
    seeds = sorted(treatment, key=str)
    diffs = {s: float(treatment[s]) - float(baseline[s]) for s in seeds}
    return mean_se(diffs.values()) | {"diffs": diffs}


def window(rows: list[dict[str, Any]], first: int, last: int) -> list[dict[str, Any]]:
    """The rows with ``first <= step <= last``."""
    return [r for r in rows if first <= int(r["step"]) <= last]


def window_mean(
    rows: list[dict[str, Any]], key: str, first: int, last: int, *, where: str | None = None
) -> float:
    """Mean of ``key`` over steps first..last (rows whose ``where`` key is 0 are left out: an empty bucket
    logs 0, not a measurement). NaN when no row in the window holds the key."""
    xs = [
        float(r[key])
        for r in window(rows, first, last)
        if _finite(r.get(key)) and (where is None or r.get(where))
    ]
    return sum(xs) / len(xs) if xs else math.nan


def relative_change(rows: list[dict[str, Any]], key: str, span: int) -> float:
    """(mean over the last ``span`` steps − mean over the first ``span``) / mean over the first: the
    per-step noise of a batch statistic averaged out at both ends."""
    steps = [int(r["step"]) for r in rows if _finite(r.get(key))]
    if not steps:
        return math.nan
    lo, hi = min(steps), max(steps)
    start, end = window_mean(rows, key, lo, lo + span - 1), window_mean(rows, key, hi - span + 1, hi)
    return (end - start) / start if start else math.nan


def fraction_at_or_above(
    rows: list[dict[str, Any]], key: str, floor_key: str, first: int, last: int
) -> float:
    """Fraction of steps first..last whose ``key`` is at or above ``floor_key`` (e.g. H̄ ≥ H_low)."""
    pairs = [
        (r[key], r[floor_key])
        for r in window(rows, first, last)
        if _finite(r.get(key)) and _finite(r.get(floor_key))
    ]
    return sum(v >= f for v, f in pairs) / len(pairs) if pairs else math.nan


def fmt(stat: Mapping[str, Any], digits: int = 3) -> str:
    """ "mean ± se (n = k)" for a table cell."""
    if stat["n"] == 0:
        return "–"
    se = "" if math.isnan(stat["se"]) else f" ± {stat['se']:.{digits}f}"
    return f"{stat['mean']:+.{digits}f}{se}" if "diffs" in stat else f"{stat['mean']:.{digits}f}{se}"
