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


def val_endpoints(rows: list[dict], where: str) -> tuple[float, float, int]:
    """(val accuracy at step 0, at the last validated step, that step) of one run's metric rows."""
    val = {int(r["step"]): float(r["val/accuracy"]) for r in rows if "val/accuracy" in r}
    if 0 not in val or len(val) < 2:
        raise SystemExit(f"{where}: needs validation at step 0 and after it (steps with val: {sorted(val)})")
    last = max(val)
    return val[0], val[last], last


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
    for arm, seeds in index.items():
        for seed, ids in seeds.items():
            if "eval" not in ids:
                raise SystemExit(f"{arm} seed {seed}: no eval in the index (the study is not finished)")
            rl, ev = ROOT / ids["rl"], ROOT / ids["eval"]
            verify_enclosing(rl)
            verify_enclosing(ev)
            before, after, last = val_endpoints(read_rows(rl / "metrics.jsonl"), f"{ids['rl']}/metrics.jsonl")
            _, result, _, samples = load_eval(ev)
            k = int(result["overall"]["k"])
            runs.setdefault(arm, {})[int(seed)] = {
                "rl": ids["rl"], "eval": ids["eval"], "val_before": before, "val_after": after, "val_step": last,
                f"avg@{k}": result["overall"][f"avg@{k}"], f"pass@{k}": result["overall"][f"pass@{k}"],
                "len_mean": result["overall"]["len_mean"],
            }  # fmt: skip
            accuracy.setdefault(arm, {})[int(seed)] = problem_accuracy(samples)
    seeds = sorted(runs[baseline])
    out: dict = {"baseline": baseline, "seeds": seeds, "arms": {}}
    for arm, by_seed in runs.items():
        if sorted(by_seed) != seeds:
            raise SystemExit(f"{arm}: seeds {sorted(by_seed)}, the baseline has {seeds}: unpaired runs")
        pairs = {s: (accuracy[arm][s], accuracy[baseline][s]) for s in seeds}
        entry = {"seeds": {str(s): by_seed[s] for s in seeds}}
        entry["delta_per_seed"] = {str(s): paired_difference(*pairs[s]) for s in seeds}
        entry["delta_pooled"] = pooled_difference(pairs)
        for key in [k for k in by_seed[seeds[0]] if k.startswith(("avg@", "pass@", "val_", "len_"))]:
            entry[key] = mean_se(by_seed[s][key] for s in seeds)
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
