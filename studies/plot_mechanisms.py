"""Figures of the mechanism studies (docs/results.md): per arm, the mean over seeds of a smoothed metric with
its seed-to-seed standard error as a band, against the GRPO arm of the same study.

    .venv/bin/python studies/plot_mechanisms.py build/studies/mechanisms build/studies/paec-long --out docs/img
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ares_cli.report.figure_helpers import read_rows  # noqa: E402
from ares_cli.report.study import mean_se  # noqa: E402

COLORS = {"grpo": "tab:gray", "paec": "tab:purple", "aer": "tab:blue", "aepo_kl": "tab:orange",
          "aepo_shaping": "tab:green", "branching": "tab:red", "paec_strong": "tab:pink"}  # fmt: skip


def smoothed(rows: list[dict], key: str, span: int, where: str | None = None) -> dict[int, float]:
    """step -> mean of ``key`` over the steps (step − span, step] that logged a finite value (and a
    positive ``where``, e.g. a non-empty bucket); steps with none in their window are left out."""
    pts = [(int(r["step"]), float(r[key])) for r in rows
           if isinstance(r.get(key), int | float) and math.isfinite(r[key]) and (where is None or r.get(where))]  # fmt: skip
    out = {}
    for step in sorted({int(r["step"]) for r in rows}):
        window = [v for s, v in pts if step - span < s <= step]
        if window:
            out[step] = sum(window) / len(window)
    return out


def band(ax, runs: dict, key: str, label: str, color: str, span: int, where=None, **style) -> None:
    curves = [smoothed(rows, key, span, where) for rows in runs.values()]
    steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    if not steps:
        return
    stats = [mean_se(c[s] for c in curves) for s in steps]
    mean = [x["mean"] for x in stats]
    se = [0.0 if math.isnan(x["se"]) else x["se"] for x in stats]
    ax.plot(steps, mean, label=f"{label} (seeds: {len(curves)})", color=color, linewidth=1.5, **style)
    ax.fill_between(steps, [m - e for m, e in zip(mean, se, strict=True)], [m + e for m, e in zip(mean, se, strict=True)],
                    color=color, alpha=0.2, linewidth=0)  # fmt: skip


def load(study: Path) -> dict[str, dict[int, list[dict]]]:
    index = json.loads((study / "index.json").read_text(encoding="utf-8"))
    return {arm: {int(s): read_rows(ROOT / ids["rl"] / "metrics.jsonl") for s, ids in seeds.items()}
            for arm, seeds in index.items()}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import yaml

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mechanisms", type=Path)
    ap.add_argument("paec_long", type=Path, nargs="?")
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    ap.add_argument("--span", type=int, default=5, help="trailing-mean window in steps (default 5)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs, span, written = load(args.mechanisms), args.span, []
    spec = yaml.safe_load((ROOT / "studies/mechanisms.yaml").read_text(encoding="utf-8"))
    arm_cfg = {
        a: yaml.safe_load((ROOT / p).read_text(encoding="utf-8"))["rl"] for a, p in spec["arms"].items()
    }

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(args.out / name, dpi=110)
        plt.close(fig)
        written.append(args.out / name)

    if "aepo_shaping" in runs:
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
        for ax, (key, title) in zip(axes, (("aepo/easy/response_len", "easy bucket: response length"),
                                           ("aepo/easy/n_he", "easy bucket: N_HE"),
                                           ("aepo/hard/n_he", "hard bucket: N_HE")), strict=True):  # fmt: skip
            where = key.rsplit("/", 1)[0] + "/size"
            for arm, label in (("grpo", "GRPO"), ("aepo_shaping", "AEPO shaping")):
                band(ax, runs[arm], key, label, COLORS[arm], span, where)
            ax.set_title(title, fontsize=10), ax.set_xlabel("step"), ax.grid(alpha=0.3), ax.legend(fontsize=7)
        if "aepo_shaping_easy" in runs:  # the easy term alone at a lower window threshold: easy length only
            band(axes[0], runs["aepo_shaping_easy"], "aepo/easy/response_len", "AEPO easy term (q 0.8)",
                 "tab:olive", span, "aepo/easy/size")  # fmt: skip
            axes[0].legend(fontsize=7)
        save(fig, "study-aepo-shaping.png")
    if "aepo_kl" in runs:
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
        targets = arm_cfg["aepo_kl"]["aepo"]["kl_target"]
        for ax, bucket, delta in zip(axes, ("easy", "medium", "hard"), targets, strict=True):
            key, where = f"aepo/{bucket}/kl_nonwindow", f"aepo/{bucket}/size"
            for arm, label in (("grpo", "GRPO"), ("aepo_kl", "AEPO dynamic KL")):
                band(ax, runs[arm], key, label, COLORS[arm], span, where)
            ax.axhline(delta, color="black", linestyle=":", label=f"δ = {delta}")
            ax.set_title(f"{bucket}: non-window KL", fontsize=10), ax.set_xlabel("step"), ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        save(fig, "study-aepo-kl.png")

    def single(arm: str, label: str, key: str, title: str, name: str, target: str | None = None) -> None:
        fig, ax = plt.subplots(figsize=(6.5, 3.6))
        for a, text in (("grpo", "GRPO"), (arm, label)):
            band(ax, runs[a], key, text, COLORS[a], span)
        if target:
            band(ax, runs[arm], target, f"{label} target", "black", 1, linestyle=":")
        ax.set_title(title, fontsize=10), ax.set_xlabel("step"), ax.grid(alpha=0.3), ax.legend(fontsize=7)
        save(fig, name)

    if "aer" in runs:
        single("aer", "AER", "entropy", "mean token entropy (AER target τ·H0)", "study-aer.png", "aer/target")
    if "branching" in runs:
        single("branching", "GRPO + branching", "rollout/hard_correct_per_ktoken",
               "hard prompts: correct per 1k generated tokens", "study-branching.png")  # fmt: skip
    if args.paec_long is not None:
        long = load(args.paec_long)
        fig, axes = plt.subplots(1, 2, figsize=(12, 3.6))
        for arm, label in (("grpo", "GRPO"), ("paec", "PAEC"), ("paec_strong", "PAEC, λ_ent 100")):
            if arm in long:
                band(axes[0], long[arm], "paec/h_bar_step", f"{label} H̄", COLORS[arm], span)
                band(axes[1], long[arm], "entropy", label, COLORS[arm], span)
        band(axes[0], long["paec"], "paec/h_low", "PAEC H_low", "black", 1, linestyle=":")
        axes[0].set_title("H̄ (PAEC's masked nucleus entropy)", fontsize=10)
        axes[1].set_title("mean token entropy", fontsize=10)
        for ax in axes:
            ax.set_xlabel("step"), ax.grid(alpha=0.3), ax.legend(fontsize=7)
        save(fig, "study-paec.png")
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
