"""Compare eval artifacts side by side: accuracy and mean length per difficulty, how strongly response
length follows difficulty (Spearman rank correlation over problems), and, against a baseline, the paired
accuracy difference over the problems both evaluated."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ares_cli.data.jsonl import read_jsonl
from ares_cli.errors import InputError, UsageError
from ares_cli.report.levels import level_order, level_ranks


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing the mean of their positions."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: the Pearson correlation of average ranks (NaN when either side is constant)."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("spearman needs two sequences of equal length >= 2")
    rx, ry = average_ranks(x), average_ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def load_eval(directory: str | Path, bench: str | None = None) -> tuple[str, dict, list[dict], list[dict]]:
    """(bench name, results, problems, samples) of one benchmark of an eval artifact."""
    directory = Path(directory)
    results_file = directory / "results.json"
    if not results_file.is_file():
        raise InputError("not an eval artifact (no results.json)", file=directory)
    results = json.loads(results_file.read_text())
    name = bench or next(iter(results))
    if name not in results:
        raise InputError(f"benchmark '{name}' not in {', '.join(results)}", file=results_file)
    problems = read_jsonl(directory / "problems" / f"{name}.jsonl")
    samples = read_jsonl(directory / "samples" / f"{name}.jsonl")
    return name, results[name], problems, samples


def length_difficulty_spearman(problems: list[dict], samples: list[dict], key: str = "difficulty") -> float:
    """Spearman correlation between each problem's difficulty and its mean response length (NaN when a
    difficulty is a category without an order, :func:`ares_cli.report.levels.level_ranks`)."""
    lengths: dict[str, list[int]] = {}
    for row in samples:
        lengths.setdefault(row["problem_id"], []).append(row["n_tokens"])
    pairs = [
        ((p.get("meta") or {}).get(key), statistics.fmean(lengths[p["id"]]))
        for p in problems
        if p["id"] in lengths
    ]
    pairs = [(d, n) for d, n in pairs if d is not None]
    ranks = level_ranks(d for d, _ in pairs)
    if len(pairs) < 2 or ranks is None:  # categories without an order have no rank correlation
        return math.nan
    return spearman([ranks[str(d)] for d, _ in pairs], [n for _, n in pairs])


def problem_accuracy(samples: list[dict]) -> dict[str, float]:
    """Each problem's fraction of correct samples."""
    graded: dict[str, list[bool]] = {}
    for row in samples:
        graded.setdefault(row["problem_id"], []).append(row["grade"] == "correct")
    return {pid: sum(flags) / len(flags) for pid, flags in graded.items()}


def paired_difference(model: dict[str, float], baseline: dict[str, float]) -> dict[str, float]:
    """Mean over shared problems of acc(model) − acc(baseline), with the standard error of that mean.

    Pairing by problem removes the between-problem variance both models share, so the SE is far smaller
    than that of either accuracy when the models agree on which problems are hard.
    """
    shared = sorted(set(model) & set(baseline))
    if not shared:
        raise InputError("the two evals share no problem ids")
    diffs = [model[pid] - baseline[pid] for pid in shared]
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan
    return {"delta": statistics.fmean(diffs), "se": se, "n": len(diffs)}


def comparison(
    evals: dict[str, str | Path], bench: str | None = None, baseline: str | None = None
) -> dict[str, Any]:
    """Per model: overall avg@K and mean length, the same per difficulty, the length–difficulty rho and,
    with ``baseline`` (one of the labels), the paired accuracy difference against it.

    Evals of different benchmarks are refused (UsageError); evals of one benchmark over different problem
    sets (e.g. another ``--limit``) are compared with a warning in ``warnings``: their accuracies are not
    comparable, and the paired difference uses only the shared problems."""
    if baseline is not None and baseline not in evals:
        raise UsageError(f"--baseline '{baseline}' is not one of the labels: {', '.join(evals)}")
    models: dict[str, Any] = {}
    levels: dict[str, None] = {}
    accuracy: dict[str, dict[str, float]] = {}
    problem_sets: dict[str, frozenset[str]] = {}
    for label, directory in evals.items():
        name, result, problems, samples = load_eval(directory, bench)
        accuracy[label] = problem_accuracy(samples)
        problem_sets[label] = frozenset(str(p["id"]) for p in problems)
        k = int(result["overall"]["k"])
        per = {
            level: {"acc": m[f"avg@{k}"], "len": m["len_mean"]}
            for level, m in result.get("by_difficulty", {}).items()
        }
        levels |= dict.fromkeys(per)
        models[label] = {"bench": name, "k": k, "acc": result["overall"][f"avg@{k}"],
                         "acc_se": result["overall"].get(f"avg@{k}_se"), "len": result["overall"]["len_mean"],
                         "spearman_len_difficulty": length_difficulty_spearman(problems, samples),
                         "by_difficulty": per}  # fmt: skip
    benches = {label: m["bench"] for label, m in models.items()}
    if len(set(benches.values())) > 1:
        listed = ", ".join(f"{label}={name}" for label, name in benches.items())
        raise UsageError(f"the evals are of different benchmarks ({listed}); name one all have with --bench")
    warnings = _problem_set_warnings(problem_sets)
    if baseline is not None:
        for label, model in models.items():
            model["vs_baseline"] = paired_difference(accuracy[label], accuracy[baseline])
    return {"models": models, "levels": level_order(levels), "baseline": baseline, "warnings": warnings}


def _problem_set_warnings(problem_sets: dict[str, frozenset[str]]) -> list[str]:
    """One warning per eval whose problems differ from the first eval's."""
    if not problem_sets:
        return []
    (first, reference), *others = problem_sets.items()
    return [
        f"{label} was evaluated on {len(ids)} problems and {first} on {len(reference)} ({len(ids & reference)} "
        "shared): accuracies over different problem sets are not comparable"
        for label, ids in others
        if ids != reference
    ]


def markdown(table: dict[str, Any]) -> str:
    """The comparison as a markdown table: accuracy / mean length per difficulty, then overall and rho."""
    levels, baseline = table["levels"], table.get("baseline")
    header = ["model"] + [f"d={lv}" for lv in levels] + ["all", "rho(len,d)"]
    header += [f"Δ vs {baseline} (± SE)"] if baseline else []
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for label, m in table["models"].items():
        cells = [
            f"{m['by_difficulty'][lv]['acc']:.2f} / {m['by_difficulty'][lv]['len']:.0f}"
            if lv in m["by_difficulty"]
            else "-"
            for lv in levels
        ]
        rho = m["spearman_len_difficulty"]
        lines.append(
            f"| {label} | "
            + " | ".join(cells)
            + f" | {m['acc']:.3f} / {m['len']:.0f} | "
            + ("-" if math.isnan(rho) else f"{rho:.3f}")
            + (f" | {_delta(m['vs_baseline'])}" if baseline else "")
            + " |"
        )
    note = "\n\nCells: accuracy (avg@K) / mean response length in tokens."
    if baseline:
        note += f" Δ: mean per-problem accuracy difference against {baseline}, paired over shared problems."
    return "\n".join(lines) + note + "\n"


def _delta(diff: dict[str, float]) -> str:
    se = "-" if math.isnan(diff["se"]) else f"{diff['se']:.3f}"
    return f"{diff['delta']:+.3f} ± {se}"


def rich_table(table: dict[str, Any]):
    """The comparison as a rich Table (for stderr)."""
    from rich.table import Table

    out = Table(title="accuracy / mean length per difficulty")
    out.add_column("model")
    for level in table["levels"]:
        out.add_column(f"d={level}", justify="right")
    out.add_column("all", justify="right")
    out.add_column("rho(len,d)", justify="right")
    if table.get("baseline"):
        out.add_column(f"Δ vs {table['baseline']}", justify="right")
    for label, m in table["models"].items():
        cells = [
            f"{m['by_difficulty'][lv]['acc']:.2f}/{m['by_difficulty'][lv]['len']:.0f}"
            if lv in m["by_difficulty"]
            else "-"
            for lv in table["levels"]
        ]
        rho = m["spearman_len_difficulty"]
        extra = [_delta(m["vs_baseline"])] if table.get("baseline") else []
        out.add_row(
            label, *cells, f"{m['acc']:.3f}/{m['len']:.0f}", "-" if math.isnan(rho) else f"{rho:.3f}", *extra
        )
    return out
