"""The toy recipes' table (docs/results.md, "What the numbers say") from a study's index (studies/run_study.py).

    .venv/bin/python studies/summarize_recipes.py build/studies/recipes [--baseline aepo]

Per run: toy-val accuracy before the first step and after the last (the run's own validation, ``val/accuracy``
at step 0 and at its last step) and toy-test avg@4 / pass@4 of its eval. Against the baseline arm, the paired
per-problem accuracy difference: per seed (arm − baseline of the same seed, over the problems both
evaluated) and pooled (each problem's difference averaged over the seeds, SE over problems). Writes
``summary.md`` and ``summary.json`` beside the index and prints the markdown.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ares_cli.report.compare import load_eval, paired_difference, problem_accuracy  # noqa: E402
from ares_cli.report.figure_helpers import read_rows  # noqa: E402
from ares_cli.report.study import mean_se  # noqa: E402

RUN_MEANS = ("accuracy", "entropy", "response_len", "aepo/shaping_abs_mean", "paec/penalty_active")


def run_means(rows: list[dict]) -> dict[str, float]:
    """Whole-run means of the training metrics in :data:`RUN_MEANS` the run logged (rollout accuracy,
    token entropy, response length, AEPO's mean |R − R_acc|, PAEC's fraction of optimiser steps with the
    penalty on), and PAEC's H̄ over its first and last 10 steps."""
    out = {}
    for key in RUN_MEANS:
        values = [float(r[key]) for r in rows if isinstance(r.get(key), int | float)]
        if values:
            out[key] = sum(values) / len(values)
    h_bar = [
        float(r["paec/h_bar_step"]) for r in sorted(rows, key=lambda r: r["step"]) if "paec/h_bar_step" in r
    ]
    if len(h_bar) >= 20:
        out["paec/h_bar_first10"], out["paec/h_bar_last10"] = sum(h_bar[:10]) / 10, sum(h_bar[-10:]) / 10
    return out


def val_by_step(rows: list[dict], where: str) -> dict[int, float]:
    """Validation accuracy per validated step of one run's metric rows (step 0 = before training)."""
    val = {int(r["step"]): float(r["val/accuracy"]) for r in rows if "val/accuracy" in r}
    if 0 not in val or len(val) < 2:
        raise SystemExit(f"{where}: needs validation at step 0 and after it (steps with val: {sorted(val)})")
    return dict(sorted(val.items()))


def pooled_difference(per_seed: dict[int, tuple[dict, dict]]) -> dict[str, float]:
    """Each problem's accuracy difference averaged over the seeds, then mean ± SE over the problems every
    seed evaluated on both sides."""
    shared = set.intersection(*(set(a) & set(b) for a, b in per_seed.values()))
    if len(shared) < 2:
        raise SystemExit("the arms share fewer than two evaluated problems")
    diffs = [statistics.fmean(a[p] - b[p] for a, b in per_seed.values()) for p in sorted(shared)]
    return {"delta": statistics.fmean(diffs), "se": statistics.stdev(diffs) / math.sqrt(len(diffs)),
            "n": len(diffs)}  # fmt: skip


def summarize(index: dict, baseline: str) -> dict:
    from ares_cli.store.artifacts import verify_enclosing

    if baseline not in index:
        raise SystemExit(f"index has no {baseline!r} arm to pair with (arms: {sorted(index)})")
    runs: dict[str, dict[int, dict]] = {}
    accuracy: dict[str, dict[int, dict[str, float]]] = {}  # arm -> seed -> problem -> accuracy
    sampling: set[tuple] = set()  # (temperature, top_p, max_new_tokens) of every eval: one setting only
    for arm, seeds in index.items():
        for seed, ids in seeds.items():
            if "eval" not in ids:
                raise SystemExit(f"{arm} seed {seed}: no eval in the index (the study is not finished)")
            rl, ev = ROOT / ids["rl"], ROOT / ids["eval"]
            verify_enclosing(rl)
            verify_enclosing(ev)
            rows = read_rows(rl / "metrics.jsonl")
            val = val_by_step(rows, f"{ids['rl']}/metrics.jsonl")
            last = max(val)
            _, result, _, samples = load_eval(ev)
            config = json.loads((ev / "manifest.json").read_text(encoding="utf-8"))["config"]
            sampling.add((config["temperature"], config["top_p"], config["max_new_tokens"]))
            k = int(result["overall"]["k"])
            runs.setdefault(arm, {})[int(seed)] = {
                "rl": ids["rl"], "eval": ids["eval"], "val_before": val[0], "val_after": val[last], "val_step": last,
                "val_by_step": {str(step): acc for step, acc in val.items()},
                f"avg@{k}": result["overall"][f"avg@{k}"], f"pass@{k}": result["overall"][f"pass@{k}"],
                "len_mean": result["overall"]["len_mean"], "run_means": run_means(rows),
            }  # fmt: skip
            accuracy.setdefault(arm, {})[int(seed)] = problem_accuracy(samples)
    if len(sampling) != 1:
        raise SystemExit(f"the evals sampled with different settings (temperature, top_p, max_new_tokens): "
                         f"{sorted(sampling)}")  # fmt: skip
    ((temperature, top_p, max_new_tokens),) = sampling
    seeds = sorted(runs[baseline])
    out: dict = {
        "baseline": baseline,
        "seeds": seeds,
        "arms": {},
        "eval_sampling": {"temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens},
    }
    for arm, by_seed in runs.items():
        if sorted(by_seed) != seeds:
            raise SystemExit(f"{arm}: seeds {sorted(by_seed)}, the baseline has {seeds}: unpaired runs")
        pairs = {s: (accuracy[arm][s], accuracy[baseline][s]) for s in seeds}
        entry = {"seeds": {str(s): by_seed[s] for s in seeds}}
        entry["delta_per_seed"] = {str(s): paired_difference(*pairs[s]) for s in seeds}
        entry["delta_pooled"] = pooled_difference(pairs)
        for key in [k for k in by_seed[seeds[0]] if k.startswith(("avg@", "pass@", "val_", "len_"))]:
            if key not in ("val_by_step", "run_means"):
                entry[key] = mean_se(by_seed[s][key] for s in seeds)
        steps = set.intersection(*(set(by_seed[s]["val_by_step"]) for s in seeds))
        entry["val_by_step"] = {st: mean_se(by_seed[s]["val_by_step"][st] for s in seeds)
                                for st in sorted(steps, key=int)}  # fmt: skip
        logged = set.intersection(*(set(by_seed[s]["run_means"]) for s in seeds))
        entry["run_means"] = {k: mean_se(by_seed[s]["run_means"][k] for s in seeds) for k in sorted(logged)}
        out["arms"][arm] = entry
    return out


def markdown(summary: dict) -> str:
    base, seeds = summary["baseline"], summary["seeds"]
    lines = [f"Seeds {seeds}. Mean over seeds; Δ: paired per-problem accuracy difference against {base}, "
             "pooled over seeds (± SE over problems), then per seed.", "",
             "| arm | toy-val before → after | toy-test avg | pass | mean length | Δ vs baseline | Δ per seed |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for arm, e in summary["arms"].items():
        avg = next(k for k in e if k.startswith("avg@"))
        pas = next(k for k in e if k.startswith("pass@"))
        d = e["delta_pooled"]
        per = ", ".join(f"{v['delta']:+.3f} ± {v['se']:.3f}" for v in e["delta_per_seed"].values())
        lines.append(f"| {arm} | {e['val_before']['mean']:.4f} → {e['val_after']['mean']:.4f} | "
                     f"{e[avg]['mean']:.3f} | {e[pas]['mean']:.3f} | {e['len_mean']['mean']:.1f} | "
                     f"{d['delta']:+.4f} ± {d['se']:.4f} | {per} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="the study's directory (holds index.json)")
    ap.add_argument("--baseline", default="aepo", help="the arm every other is paired with (default aepo)")
    args = ap.parse_args(argv)
    index = json.loads((args.out / "index.json").read_text(encoding="utf-8"))
    summary = summarize(index, args.baseline)
    text = markdown(summary)
    (args.out / "summary.md").write_text(text + "\n", encoding="utf-8")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
