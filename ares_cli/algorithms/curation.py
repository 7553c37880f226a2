"""AdaCS length-targeted, bracket-uniform cold-start curation (ARES paper, section 3.1).

For every data source the paper anchors two lengths, L(0) and L(1): the median token length of the
responses of the hardest (pass rate 0) and easiest (pass rate 1) problems. Each pass-rate bracket p then
gets the target (section 3.1, the L_target equation)

    L_target(p) = (1 - p) * L(0) + p * L(1)

and each problem keeps the correct response whose length is nearest its bracket's target, while problems
are sampled uniformly (the same count) across brackets. ``mode="uniform"`` is the ARES-CS-Vanilla ablation
of table 4: the same bracket-uniform problem sampling, but a random correct response (length ignored).

Pure functions over records: no I/O, no torch. Inputs are pass-rate records
``{problem_id, source, k, n_correct, pass_rate, ...}``, candidate responses ``{problem_id, response,
n_tokens, correct | grade, sample_idx?}`` (sample records work as they are) and ``problem_id -> prompt``.
The output is SFT examples ``{problem_id, source, prompt, response, n_tokens, pass_rate, target_len,
bracket}`` and a stats dict (see :func:`curate`). ``plot_length_vs_passrate`` (matplotlib) lives in
``ares_cli.report.plot_curate``.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ares_cli.algorithms.curation_records import (
    Bracket,
    Candidate,
    Problem,
    parse_candidates,
    parse_pass_rates,
)
from ares_cli.config import option, seed_option
from ares_cli.errors import InputError, UsageError

__all__ = [
    "MODES", "FALLBACK_RULES", "CurationConfig", "Candidate", "Bracket", "Problem", "target_length",
    "choose_nearest", "parse_pass_rates", "parse_candidates", "length_anchors", "bracket_quotas", "curate",
    "length_vs_passrate_points"
]  # fmt: skip

MODES = ("length", "uniform")
FALLBACK_RULES = ("nearest_bracket", "global")


@dataclass(frozen=True)
class CurationConfig:
    """AdaCS curation settings; defaults follow section 3.1 of the ARES paper."""

    mode: str = option(
        "length", '"length": the correct response nearest L_target (AdaCS); "uniform": a random correct one.'
    )
    per_bracket: int | None = option(None, "Problems sampled per pass-rate bracket; exclusive with size.")
    size: int | None = option(
        None, "Total problems, split evenly over brackets; the remainder one each to the lowest pass rates."
    )
    seed: int = seed_option(
        0, "Seed of the single random.Random used for problem sampling (and uniform mode)."
    )
    l0_fallback: tuple[str, ...] = option(
        ("nearest_bracket", "global"), "Rules tried in order when a source has no pass-rate-0 lengths."
    )
    l1_fallback: tuple[str, ...] = option(
        ("nearest_bracket", "global"), "Rules tried in order when a source has no pass-rate-1 lengths."
    )

    def __post_init__(self) -> None:
        for name in ("l0_fallback", "l1_fallback"):  # YAML gives lists; keep the config hashable
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.mode not in MODES:
            raise UsageError(f"curation mode must be one of {MODES}, got {self.mode!r}")
        if self.per_bracket is not None and self.size is not None:
            raise UsageError("give per_bracket or size, not both")
        for name in ("per_bracket", "size"):
            value = getattr(self, name)
            if value is not None and value < 1:  # 0 would choose nothing and fail after the work
                raise UsageError(f"{name} must be >= 1, got {value}")
        for name in ("l0_fallback", "l1_fallback"):
            bad = [r for r in getattr(self, name) if r not in FALLBACK_RULES]
            if bad:
                raise UsageError(f"{name}: unknown rule(s) {bad}; choose from {FALLBACK_RULES}")


def target_length(pass_rate: float, l0: float, l1: float) -> float:
    """L_target(p) = (1 - p)·L(0) + p·L(1) (ARES section 3.1)."""
    return (1.0 - pass_rate) * l0 + pass_rate * l1


def choose_nearest(candidates: Iterable[Candidate], target: float) -> Candidate | None:
    """The correct candidate nearest ``target``; ties: smaller |n_tokens - target|, then shorter, then
    lower sample_idx. ``None`` when no candidate is correct."""
    correct = [c for c in candidates if c.correct]
    if not correct:
        return None
    return min(correct, key=lambda c: (abs(c.n_tokens - target), c.n_tokens, c.sample_idx))


def _median(lengths: Sequence[int]) -> float | None:
    return float(statistics.median(lengths)) if lengths else None


def length_anchors(
    problems: Sequence[Problem], candidates: Mapping[str, Sequence[Candidate]], config: CurationConfig
) -> dict[str, dict[str, Any]]:
    """Per source: L(0), L(1) and the rule that gave each.

    Observed anchors are the median n_tokens of ALL candidates (correct or not) of the source's problems
    with pass rate 0 (L0) or 1 (L1), as in section 3.1. When a source has none, the config's fallback
    rules are tried in order: "nearest_bracket" = median over all candidates of the source's lowest
    bracket with p < 1 (for L0) / highest with p > 0 (for L1); "global" = the observed anchor pooled over
    all sources. If none applies the value is None and the rule "unavailable".
    """
    by_source: dict[str, dict[Bracket, list[int]]] = {}
    for prob in problems:
        lengths = by_source.setdefault(prob.source, {}).setdefault(prob.bracket, [])
        lengths.extend(c.n_tokens for c in candidates.get(prob.problem_id, ()))

    def pooled(end: int, brackets: Mapping[Bracket, list[int]]) -> list[int]:
        return [n for b, ls in brackets.items() if b.n_correct == end * b.k for n in ls]

    global_len = {
        end: _median([n for brackets in by_source.values() for n in pooled(end, brackets)]) for end in (0, 1)
    }
    anchors: dict[str, dict[str, Any]] = {}
    for source in sorted(by_source):
        brackets = by_source[source]
        info: dict[str, Any] = {}
        for end, rules in ((0, config.l0_fallback), (1, config.l1_fallback)):
            name = f"L{end}"
            value, rule = _median(pooled(end, brackets)), "observed"
            for fallback in rules if value is None else ():
                if fallback == "nearest_bracket":
                    inner = sorted(
                        (b for b in brackets if brackets[b] and b.n_correct != (1 - end) * b.k),
                        key=lambda b: b.sort_key,
                    )
                    if inner:
                        nearest = inner[0] if end == 0 else inner[-1]
                        value, rule = _median(brackets[nearest]), f"nearest_bracket:{nearest.label}"
                elif fallback == "global" and global_len[end] is not None:
                    value, rule = global_len[end], "global"
                if value is not None:
                    break
            info[name], info[f"{name}_rule"] = value, (rule if value is not None else "unavailable")
            info[f"n_pass{end}"] = sum(
                1 for p in problems if p.source == source and p.bracket.n_correct == end * p.bracket.k
            )
        anchors[source] = info
    return anchors


def bracket_quotas(
    brackets: Sequence[Bracket], eligible: Mapping[Bracket, int], config: CurationConfig
) -> tuple[dict[Bracket, int], str]:
    """Problems wanted per bracket, and the rule used.

    "per_bracket": ``config.per_bracket`` each. "size": ``size // B`` each over all B brackets, the
    remainder one each to the lowest pass rates first. "balanced" (neither given): the smallest eligible
    count among brackets that have any eligible problem, so non-empty brackets are exactly uniform.
    """
    ordered = sorted(brackets, key=lambda b: b.sort_key)
    if config.per_bracket is not None:
        return {b: config.per_bracket for b in ordered}, "per_bracket"
    if config.size is not None:
        base, extra = divmod(config.size, len(ordered)) if ordered else (0, 0)
        return {b: base + (1 if i < extra else 0) for i, b in enumerate(ordered)}, "size"
    nonempty = [eligible.get(b, 0) for b in ordered if eligible.get(b, 0) > 0]
    quota = min(nonempty) if nonempty else 0
    return {b: quota for b in ordered}, "balanced"


def curate(
    pass_rates: Iterable[Mapping[str, Any]],
    candidates: Iterable[Mapping[str, Any] | Candidate],
    prompts: Mapping[str, str],
    config: CurationConfig | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """AdaCS curation (ARES section 3.1; ``mode="uniform"`` is table 4's ARES-CS-Vanilla).

    Brackets are every n/k for n = 0..k of each k seen (so empty brackets, usually 0/k, are reported).
    A problem is eligible when it has at least one correct candidate; others are skipped and counted per
    bracket (pass-rate-0 problems have no correct policy sample, so bracket 0/k fills only from teacher
    responses). Per bracket, ``rng.sample`` draws the quota from the eligible problems sorted by
    problem_id, brackets in ascending pass rate, one ``random.Random(seed)``; a bracket with too few takes
    all and reports the shortfall. Then each drawn problem (bracket order, problem_id order) gets its
    response: "length" = :func:`choose_nearest` to L_target(p) of its source; "uniform" =
    ``rng.choice`` over its correct candidates in sample_idx order. Both modes draw the same problems.
    Examples come out in bracket order, then problem_id. In uniform mode ``target_len`` is informational
    (None where the source's anchors are unavailable); in length mode a missing anchor is an InputError.

    Stats: mode, seed, quota_rule, per-bracket {pass_rate, problems, eligible, no_correct, quota,
    chosen, shortfall, target_len_mean, chosen_len_mean}, per-source anchors (:func:`length_anchors`),
    skipped_no_correct, unknown_candidates (candidates of problems without a pass-rate record),
    total_chosen, total_shortfall.
    """
    config = config or CurationConfig()
    problems = parse_pass_rates(pass_rates)
    by_problem = parse_candidates(candidates)
    known = {p.problem_id for p in problems}
    anchors = length_anchors(problems, by_problem, config)

    brackets = {Bracket(n, k, n / k) for k in {p.bracket.k for p in problems} for n in range(k + 1)}
    members: dict[Bracket, list[Problem]] = {b: [] for b in brackets}
    eligible: dict[Bracket, list[Problem]] = {b: [] for b in brackets}
    for prob in sorted(problems, key=lambda p: p.problem_id):
        members[prob.bracket].append(prob)
        if any(c.correct for c in by_problem.get(prob.problem_id, ())):
            eligible[prob.bracket].append(prob)
    quotas, quota_rule = bracket_quotas(list(brackets), {b: len(v) for b, v in eligible.items()}, config)
    ordered = sorted(brackets, key=lambda b: b.sort_key)

    rng = random.Random(config.seed)
    drawn = {
        b: sorted(rng.sample(eligible[b], min(quotas[b], len(eligible[b]))), key=lambda p: p.problem_id)
        for b in ordered
    }
    missing = sorted(p.problem_id for b in ordered for p in drawn[b] if p.problem_id not in prompts)
    if missing:
        raise InputError(
            f"no prompt for {len(missing)} problem(s): {', '.join(missing[:10])}", field="prompt"
        )

    examples: list[dict[str, Any]] = []
    bracket_stats: dict[str, dict[str, Any]] = {}
    for b in ordered:
        targets, lengths = [], []
        for prob in drawn[b]:
            src = anchors[prob.source]
            target = None
            l0, l1 = src["L0"], src["L1"]
            if (l0 is not None or b.pass_rate == 1) and (l1 is not None or b.pass_rate == 0):
                # an anchor of weight 0 in eq. 9 may be missing (a model that solves nothing has no L(1))
                target = target_length(
                    b.pass_rate, l0 if l0 is not None else 0.0, l1 if l1 is not None else 0.0
                )
            correct = [c for c in by_problem[prob.problem_id] if c.correct]
            if config.mode == "uniform":
                chosen = rng.choice(correct)
            elif target is None:
                raise InputError(
                    f"source {prob.source!r}: no L(0)/L(1) anchor (rules {config.l0_fallback} / "
                    f"{config.l1_fallback}); allow a fallback or add responses",
                    field="source",
                )
            else:
                chosen = choose_nearest(correct, target)
                assert chosen is not None  # eligible problems have a correct candidate
            examples.append(
                {
                    "problem_id": prob.problem_id,
                    "source": prob.source,
                    "prompt": prompts[prob.problem_id],
                    "response": chosen.response,
                    "n_tokens": chosen.n_tokens,
                    "pass_rate": b.pass_rate,
                    "target_len": target,
                    "bracket": b.label,
                }
            )
            lengths.append(chosen.n_tokens)
            if target is not None:
                targets.append(target)
        bracket_stats[b.label] = {
            "pass_rate": b.pass_rate,
            "problems": len(members[b]),
            "eligible": len(eligible[b]),
            "no_correct": len(members[b]) - len(eligible[b]),
            "quota": quotas[b],
            "chosen": len(drawn[b]),
            "shortfall": quotas[b] - len(drawn[b]),
            "target_len_mean": statistics.fmean(targets) if targets else None,
            "chosen_len_mean": statistics.fmean(lengths) if lengths else None,
        }
    stats = {
        "mode": config.mode,
        "seed": config.seed,
        "quota_rule": quota_rule,
        "brackets": bracket_stats,
        "sources": anchors,
        "skipped_no_correct": sum(s["no_correct"] for s in bracket_stats.values()),
        "unknown_candidates": sum(len(v) for pid, v in by_problem.items() if pid not in known),
        "total_chosen": len(examples),
        "total_shortfall": sum(s["shortfall"] for s in bracket_stats.values()),
    }
    return examples, stats


def length_vs_passrate_points(examples: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Plot data: one point per SFT example, ``{problem_id, source, bracket, pass_rate, n_tokens,
    target_len}``, sorted by (source, pass_rate, problem_id)."""
    keys = ("problem_id", "source", "bracket", "pass_rate", "n_tokens", "target_len")
    points = [{k: ex.get(k) for k in keys} for ex in examples]
    return sorted(points, key=lambda p: (str(p["source"]), float(p["pass_rate"]), str(p["problem_id"])))
