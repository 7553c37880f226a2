"""The mechanism studies' tables (docs/results.md) from a study's index (studies/run_study.py).

    .venv/bin/python studies/summarize_mechanisms.py build/studies/mechanisms [--late 31]

Every quantity is one number per run (a mean over steps; "late" = steps ``--late``..end, where effects have
had time to build), paired with the GRPO run of the same seed, and summarised over seeds as mean ± SE.
Writes ``summary.md`` and ``summary.json`` beside the index and prints the markdown.
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
from ares_cli.report.study import (  # noqa: E402
    fmt,
    fraction_at_or_above,
    mean_se,
    paired,
    relative_change,
    window_mean,
)

BUCKETS = ("easy", "medium", "hard")


def load(out: Path) -> tuple[dict, dict]:
    """arm -> seed -> metric rows, and arm -> seed -> eval results (overall, first benchmark)."""
    from ares_cli.store.artifacts import verify_enclosing

    index = json.loads((out / "index.json").read_text(encoding="utf-8"))
    rows, evals = {}, {}
    for arm, seeds in index.items():
        for seed, ids in seeds.items():
            art = ROOT / ids["rl"]
            verify_enclosing(art)
            rows.setdefault(arm, {})[int(seed)] = read_rows(art / "metrics.jsonl")
            if "eval" in ids:
                ev = ROOT / ids["eval"]
                verify_enclosing(ev)
                results = json.loads((ev / "results.json").read_text(encoding="utf-8"))
                evals.setdefault(arm, {})[int(seed)] = next(iter(results.values()))["overall"]
    return rows, evals


def per_seed(runs: dict, fn) -> dict[int, float]:
    return {seed: fn(r) for seed, r in sorted(runs.items())}


def last_step(rows: dict) -> int:
    """The last step every run reached (arm -> seed -> rows)."""
    return min(max(int(r["step"]) for r in rs) for seeds in rows.values() for rs in seeds.values())


def _pair_row(label: str, arm: dict, base: dict) -> str:
    seeds = sorted(set(arm) & set(base))
    a, b = {s: arm[s] for s in seeds}, {s: base[s] for s in seeds}
    return (f"| {label} | {fmt(mean_se(b.values()))} | {fmt(mean_se(a.values()))} | {fmt(paired(a, b))} | "
            + ", ".join(f"{a[s] - b[s]:+.3f}" for s in seeds) + " |")  # fmt: skip


def summarize(rows: dict, evals: dict, late: int) -> tuple[str, dict]:
    grpo, out, md = rows["grpo"], {}, []
    end = last_step(rows)
    head = "| quantity | GRPO | arm | paired Δ (arm − GRPO) | Δ per seed |\n|---|---|---|---|---|"

    def lw(key, where=None):  # late-window mean of one run
        return lambda r: window_mean(r, key, late, end, where=where)

    def whole(key, where=None):
        return lambda r: window_mean(r, key, 1, end, where=where)

    def section(arm, title, quantities):
        if arm not in rows:
            return
        md.extend([f"### {title}", "", head])
        out[arm] = {}
        for label, fn in quantities:
            a, b = per_seed(rows[arm], fn), per_seed(grpo, fn)
            md.append(_pair_row(label, a, b))
            out[arm][label] = {"arm": a, "grpo": b, "paired": paired({s: a[s] for s in b if s in a},
                                                                      {s: b[s] for s in a if s in b})}  # fmt: skip
        md.append("")

    seeds = sorted(grpo)
    md += [f"Seeds {seeds}; steps 1–{end}; late window steps {late}–{end}. Mean ± SE over seeds.", ""]
    section("aepo_shaping", "AEPO hierarchical entropy reward", [
        (f"easy response length, steps {late}–{end}", lw("aepo/easy/response_len", "aepo/easy/size")),
        (f"hard N_HE, steps {late}–{end}", lw("aepo/hard/n_he", "aepo/hard/size")),
        (f"medium N_HE, steps {late}–{end}", lw("aepo/medium/n_he", "aepo/medium/size")),
        (f"easy N_HE, steps {late}–{end}", lw("aepo/easy/n_he", "aepo/easy/size")),
        (f"hard response length, steps {late}–{end}", lw("aepo/hard/response_len", "aepo/hard/size")),
        (f"rollout accuracy, steps {late}–{end}", lw("accuracy")),
        ("mean |R − R_acc| (whole run)", whole("aepo/shaping_abs_mean")),
    ])  # fmt: skip
    section("aepo_shaping_easy", "AEPO's easy-bucket term alone (window quantile 0.8, appendix I reading)", [
        (f"easy response length, steps {late}–{end}", lw("aepo/easy/response_len", "aepo/easy/size")),
        (f"medium response length, steps {late}–{end}", lw("aepo/medium/response_len", "aepo/medium/size")),
        (f"hard response length, steps {late}–{end}", lw("aepo/hard/response_len", "aepo/hard/size")),
        (f"rollout accuracy, steps {late}–{end}", lw("accuracy")),
        ("mean |R − R_acc| (whole run)", whole("aepo/shaping_abs_mean")),
    ])  # fmt: skip
    if "aepo_kl" in rows:
        md += ["### AEPO dynamic KL: non-window KL per bucket against its target", "",
               "| bucket | δ_d | GRPO (κ fixed) | AEPO dynamic KL | KL/δ | final κ_d |", "|---|---|---|---|---|---|"]  # fmt: skip
        out["aepo_kl"] = {}
        for d in BUCKETS:
            key, size = f"aepo/{d}/kl_nonwindow", f"aepo/{d}/size"
            a, b = per_seed(rows["aepo_kl"], lw(key, size)), per_seed(grpo, lw(key, size))
            kappa = per_seed(
                rows["aepo_kl"],
                lambda r, d=d: [x for x in r if f"aepo/{d}/kappa" in x][-1][f"aepo/{d}/kappa"],
            )
            delta = _kl_target(d)
            ratio = mean_se(v / delta for v in a.values())
            md.append(f"| {d} | {delta:g} | {fmt(mean_se(b.values()), 4)} | {fmt(mean_se(a.values()), 4)} | "
                      f"{fmt(ratio, 2)} | {fmt(mean_se(kappa.values()), 4)} |")  # fmt: skip
            out["aepo_kl"][d] = {"delta": delta, "arm": a, "grpo": b, "kappa_final": kappa}
        md.append("")
    for arm, title in (("paec", "PAEC"), ("paec_strong", "PAEC, λ_ent ×10")):
        section(arm, title, [
            ("H̄, relative change (first 10 → last 10 steps)", lambda r: relative_change(r, "paec/h_bar_step", 10)),
            ("steps with H̄ ≥ H_low", lambda r: fraction_at_or_above(r, "paec/h_bar_step", "paec/h_low", 1, end)),
            ("H̄ / H_low, last 10 steps", lambda r: window_mean(r, "paec/h_bar_step", end - 9, end)
             / window_mean(r, "paec/h_low", end - 9, end)),
            ("mean token entropy, relative change (first 10 → last 10 steps)",
             lambda r: relative_change(r, "entropy", 10)),
            (f"mean token entropy, steps {late}–{end}", lw("entropy")),
            (f"rollout accuracy, steps {late}–{end}", lw("accuracy")),
        ])  # fmt: skip
        if arm not in rows:
            continue
        gate = per_seed(rows[arm], whole("paec/penalty_active"))
        md += [f"{title}: optimiser steps with the penalty on {fmt(mean_se(gate.values()), 2)}.", ""]
        out[arm]["penalty_active"] = gate
        if arm in evals and "grpo" in evals:
            md += [
                f"| toy-test (400 × 8) | GRPO | {title} | paired Δ | Δ per seed |",
                "|---|---|---|---|---|",
            ]
            for metric in ("maj@8", "pass@8", "avg@8"):
                a = {s: e[metric] for s, e in evals[arm].items()}
                b = {s: e[metric] for s, e in evals["grpo"].items() if s in a}
                md.append(_pair_row(metric, a, b))
                out[arm][metric] = {"arm": a, "grpo": b, "paired": paired(a, b)}
            md.append("")
    if "aer" in rows:
        tau, k = _aer_setting()

        def target(r):  # tau * H0, H0 = mean entropy of the first K steps (AER's anchor, for both arms)
            return tau * window_mean(r, "entropy", 1, k)

        def gap(r):
            return (window_mean(r, "entropy", late, end) - target(r)) / target(r)

        def above(r):
            return sum(x["entropy"] >= target(r) for x in r) / len(r)

        section("aer", f"AER: entropy against its target τ·H0 (τ = {tau}, H0 = mean entropy of steps 1–{k})", [
            (f"(H − τH0)/τH0, steps {late}–{end}", gap),
            (f"steps with H ≥ τH0 (of {end})", above),
            (f"mean token entropy, steps {late}–{end}", lw("entropy")),
            (f"rollout accuracy, steps {late}–{end}", lw("accuracy")),
        ])  # fmt: skip
        logged = per_seed(rows["aer"], lambda r: [x for x in r if "aer/target" in x][-1]["aer/target"])
        drift = max(abs(logged[s] - target(r)) for s, r in rows["aer"].items())
        md += [f"The AER runs' own logged target agrees with τ·H0 computed here to {drift:.1e}.", ""]
        alpha = per_seed(rows["aer"], whole("aer/alpha"))
        md += [f"AER alone: mean α over the run {fmt(mean_se(alpha.values()), 4)}.", ""]
        out["aer"]["alpha_mean"] = alpha
    section("branching", "Entropy-triggered branching", [
        ("hard-prompt correct per 1k generated tokens (whole run)", whole("rollout/hard_correct_per_ktoken")),
        ("correct per 1k generated tokens (whole run)", whole("rollout/correct_per_ktoken")),
        ("generated tokens per step (whole run)", _generated_tokens),
        ("tokens processed per step, prompts and branch prefixes included (whole run)", whole("tokens")),
        ("rollout accuracy (whole run)", whole("accuracy")),
    ])  # fmt: skip
    if "branching" in rows:
        pts = per_seed(rows["branching"], whole("branch/points_hard"))
        toks = per_seed(rows["branching"], whole("branch/tokens"))
        md += [f"Branching alone: hard-prompt branch points per step {fmt(mean_se(pts.values()), 2)}, "
               f"branch tokens per step {fmt(mean_se(toks.values()), 1)}.", ""]  # fmt: skip
    return "\n".join(md), out


def generated_tokens(row: dict, responses: int) -> float:
    """Response tokens sampled in one step: the G rollouts of every prompt plus the branches' continuations,
    never their shared prefixes. ``rollout/generated_tokens`` where the run logged it; otherwise recovered
    exactly from two metrics every run logs, accuracy (correct / rows) and rollout/correct_per_ktoken
    (1000 correct / generated tokens): generated = 1000 * accuracy * rows / correct_per_ktoken, rows = the
    step's ``responses`` (G per prompt) plus its branch responses. The mean response length times the rows
    would count each branch's prefix again (a branch row holds prefix + continuation)."""
    if "rollout/generated_tokens" in row:
        return float(row["rollout/generated_tokens"])
    rows = responses + row.get("branch/responses", 0)
    if row["rollout/correct_per_ktoken"] <= 0:
        raise ValueError(f"step {row.get('step')}: no correct response, generated tokens cannot be recovered")
    return 1000.0 * row["accuracy"] * rows / row["rollout/correct_per_ktoken"]


def _generated_tokens(rows: list[dict]) -> float:
    """Mean over steps of :func:`generated_tokens`."""
    cfg = _spec_arm("grpo")["rollout"]
    per_step = [generated_tokens(r, cfg["prompts_per_step"] * cfg["group_size"]) for r in rows]
    return sum(per_step) / len(per_step)


def yaml_load(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _spec_arm(name: str) -> dict:
    spec = yaml_load(ROOT / "studies/mechanisms.yaml")
    return yaml_load(ROOT / spec["arms"][name])["rl"]


def _kl_target(bucket: str) -> float:
    return float(_spec_arm("aepo_kl")["aepo"]["kl_target"][BUCKETS.index(bucket)])


def _aer_setting() -> tuple[float, int]:
    """AER's target ratio τ and anchor steps K as the study's AER recipe sets them."""
    from ares_cli.training.rl.config import resolve_rl_config

    spec = yaml_load(ROOT / "studies/mechanisms.yaml")
    cfg = resolve_rl_config(yaml_path=ROOT / spec["arms"]["aer"]).aer
    return float(cfg.target_ratio), int(cfg.anchor_steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="the study's directory (holds index.json)")
    ap.add_argument("--late", type=int, default=31, help="first step of the late window (default 31)")
    args = ap.parse_args(argv)
    rows, evals = load(args.out)
    if "grpo" not in rows:
        raise SystemExit(f"{args.out}/index.json has no grpo run: nothing to pair with")
    text, data = summarize(rows, evals, args.late)
    (args.out / "summary.md").write_text(text + "\n", encoding="utf-8")
    (args.out / "summary.json").write_text(json.dumps(data, indent=1, default=_nan) + "\n", encoding="utf-8")
    print(text)
    return 0


def _nan(x):
    return None if isinstance(x, float) and math.isnan(x) else str(x)


if __name__ == "__main__":
    sys.exit(main())
