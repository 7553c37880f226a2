"""Benchmark-specific scores over graded samples (pure functions), named by a manifest's ``aggregate``.

- ``worst_case`` (DynaMath): problems sharing ``meta[group]`` are variants of one seed question; the seed
  question counts as solved at sample index j only when every variant's sample j is correct. Its score is
  the mean over j < K, and the benchmark score the mean over seed questions (DynaMath's worst-case
  accuracy when K = 1).
- ``wemath_strict`` (We-Math): a composite problem (``meta[step]`` = ``2steps_multi``/``3steps_multi``)
  and its one-step parts (``2steps_1``, ``2steps_2``, ...) share ``meta[group]``. At sample j the composite
  is complete mastery (CM: parts and composite correct), inadequate generalisation (IG: parts correct,
  composite wrong), rote memorisation (RM, strict: a part wrong, composite correct) or insufficient
  knowledge (IK: a part wrong, composite wrong). The strict score is (N - 0.5 IG - RM - IK) / N over the
  N composites, i.e. the mean of 1 for CM, 0.5 for IG and 0 otherwise; rows of other step keys (plain
  one-step problems) do not enter it.

Each score comes with the standard error of its per-group scores (ddof = 1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ares_cli.scoring.metrics import mean, standard_error

__all__ = ["KINDS", "check_spec", "correct_by_problem", "worst_case", "wemath_outcomes", "aggregate"]

KINDS = {"worst_case": ("group",), "wemath_strict": ("group", "step")}
_STEP = re.compile(r"^(\d+)steps_(\d+|multi)$")


def check_spec(spec: Any) -> None:
    """Validate an ``aggregate`` mapping; raises ValueError naming the problem."""
    if not isinstance(spec, dict) or spec.get("kind") not in KINDS:
        raise ValueError(f"must be a mapping with kind: one of {', '.join(KINDS)}")
    needed = KINDS[spec["kind"]]
    for key in spec:
        if key != "kind" and key not in needed:
            raise ValueError(f"unknown key {key!r} for kind {spec['kind']} (allowed: {', '.join(needed)})")
    for key in needed:
        if not isinstance(spec.get(key), str) or not spec[key]:
            raise ValueError(f"kind {spec['kind']} needs {key}: a meta field name")


def correct_by_problem(samples: Sequence[Mapping], k: int) -> dict[str, list[bool]]:
    """Problem id → correctness of its first ``k`` samples (by ``sample_idx``)."""
    rows: dict[str, list[Mapping]] = {}
    for s in samples:
        rows.setdefault(str(s["problem_id"]), []).append(s)
    out = {}
    for pid, group in rows.items():
        group = sorted(group, key=lambda r: r.get("sample_idx", 0))[:k]
        if len(group) < k:
            raise ValueError(f"problem {pid} has {len(group)} samples, fewer than K={k}")
        out[pid] = [r["grade"] == "correct" for r in group]
    return out


def worst_case(correct: Mapping[str, Sequence[bool]], group_of: Mapping[str, str], k: int) -> list[float]:
    """Per seed question: the fraction of sample indices j < k at which all its variants are correct."""
    groups: dict[str, list[str]] = {}
    for pid, group in group_of.items():
        groups.setdefault(group, []).append(pid)
    return [sum(all(correct[p][j] for p in pids) for j in range(k)) / k for pids in groups.values()]


def wemath_outcomes(
    correct: Mapping[str, Sequence[bool]], group_of: Mapping[str, str], step_of: Mapping[str, str], k: int
) -> tuple[list[float], dict[str, int]]:
    """Per composite: its strict score (mean over j of 1 CM, 0.5 IG, 0 RM/IK), and the CM/IG/RM/IK counts."""
    parts: dict[str, list[str]] = {}
    multi: dict[str, str] = {}
    for pid, step in step_of.items():
        m = _STEP.match(str(step))
        if m is None:
            continue
        if m.group(2) == "multi":
            multi[group_of[pid]] = pid
        else:
            parts.setdefault(group_of[pid], []).append(pid)
    counts = {"CM": 0, "IG": 0, "RM": 0, "IK": 0}
    scores = []
    for group, composite in multi.items():
        subs = parts.get(group)
        if not subs:
            raise ValueError(f"We-Math composite {group!r} has no one-step parts")
        total = 0.0
        for j in range(k):
            parts_ok = all(correct[p][j] for p in subs)
            whole_ok = correct[composite][j]
            label = ("CM" if whole_ok else "IG") if parts_ok else ("RM" if whole_ok else "IK")
            counts[label] += 1
            total += {"CM": 1.0, "IG": 0.5}.get(label, 0.0)
        scores.append(total / k)
    return scores, counts


def aggregate(
    spec: Mapping[str, str], problems: Sequence[Mapping], samples: Sequence[Mapping], k: int
) -> dict:
    """The manifest's aggregate score for one benchmark: ``{kind, score, score_se, n_groups, ...}``."""
    correct = correct_by_problem(samples, k)
    meta = {str(p["id"]): p.get("meta") or {} for p in problems if str(p["id"]) in correct}

    def field(name: str) -> dict[str, str]:
        missing = [pid for pid, m in meta.items() if m.get(name) is None]
        if missing:
            raise ValueError(f"aggregate {spec['kind']}: problem {missing[0]} has no meta.{name}")
        return {pid: str(m[name]) for pid, m in meta.items()}

    out: dict[str, Any] = {"kind": spec["kind"], "k": k}
    if spec["kind"] == "worst_case":
        scores = worst_case(correct, field(spec["group"]), k)
    else:
        steps = {pid: str(m.get(spec["step"])) for pid, m in meta.items()}
        scores, counts = wemath_outcomes(correct, field(spec["group"]), steps, k)
        out["counts"] = counts
    out.update(score=mean(scores), score_se=standard_error(scores), n_groups=len(scores))
    return out
