"""The study tables of docs/results.md, rendered from the stored study summaries in studies/results/.

Each entry of :data:`STUDY_TABLES` maps a stored summary (``mechanisms.json``, ``paec-long.json``: the
``summary.json`` that ``studies/summarize_mechanisms.py`` writes for a study; ``recipes.json``, that of
``studies/summarize_recipes.py``) and a section name to the doc's
table; ``studies/render_results.py`` checks and rewrites the marked tables with them. Every cell is a mean ±
standard error over the seeds, or one seed's paired difference (arm − GRPO of the same seed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def _mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else float("nan")
    return mean, (var / n) ** 0.5


def _fmt(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}".replace("-", "−")


def _fmt_pm(values: list[float], digits: int, signed: bool = False) -> str:
    mean, se = _mean_se(values)
    head = f"{'+' if signed and mean >= 0 else ''}{_fmt(mean, digits)}"
    return f"{head} ± {_fmt(se, digits)}"


def _signed(value: float, digits: int) -> str:
    return f"{'+' if value >= 0 else ''}{_fmt(value, digits)}"


def _row(*cols: str) -> str:
    return "| " + " | ".join(cols) + " |"


def _by_seed(values: dict) -> list[float]:
    return [float(values[s]) for s in sorted(values, key=int)]


@dataclass(frozen=True)
class Row:
    label: str  # as the doc prints it
    key: str  # the quantity's label in the summary
    digits: int


@dataclass(frozen=True)
class PairedTable:
    """GRPO | arm | paired Δ | Δ per seed, one row per quantity of ``arm`` in a study summary."""

    arm: str
    header: str  # the doc's header row
    rows: tuple[Row, ...]

    def render(self, summary: dict) -> list[str]:
        lines = [self.header, "|" + "---|" * (self.header.strip().count("|") - 1)]
        for row in self.rows:
            entry = summary[self.arm][row.key]
            seeds = sorted(set(entry["arm"]) & set(entry["grpo"]), key=int)
            arm = [float(entry["arm"][s]) for s in seeds]
            base = [float(entry["grpo"][s]) for s in seeds]
            deltas = [a - b for a, b in zip(arm, base, strict=True)]
            lines.append(
                _row(row.label, _fmt_pm(base, row.digits), _fmt_pm(arm, row.digits),
                     _fmt_pm(deltas, row.digits, signed=True), ", ".join(_signed(d, row.digits) for d in deltas))
            )  # fmt: skip
        return lines


def aepo_kl_table(summary: dict) -> list[str]:
    """AEPO's dynamic KL: each bucket's late non-window KL under GRPO and AEPO, as a multiple of its target
    δ_d (GRPO's mean → AEPO's mean ± SE), and the controller's final κ_d."""
    lines = [
        "| bucket | δ_d | GRPO (κ fixed at 0.001) | AEPO dynamic KL | KL / δ_d, GRPO → AEPO | final κ_d (from 0.01) |",
        "|---|---|---|---|---|---|",
    ]
    for bucket in ("easy", "medium", "hard"):
        entry = summary["aepo_kl"][bucket]
        delta = float(entry["delta"])
        grpo, arm = _by_seed(entry["grpo"]), _by_seed(entry["arm"])
        lines.append(
            _row(bucket, f"{delta:g}", _fmt_pm(grpo, 4), _fmt_pm(arm, 4),
                 f"{_fmt(_mean_se([v / delta for v in grpo])[0], 2)} → {_fmt_pm([v / delta for v in arm], 2)}",
                 _fmt_pm(_by_seed(entry["kappa_final"]), 3))
        )  # fmt: skip
    return lines


LATE = "steps 31–60"  # the mechanism study's late window (60-step runs)
LONG_LATE = "steps 76–150"  # the long PAEC study's (150-step runs, summarised with --late 76)
TOY_TEST = (
    Row("toy-test Maj@8", "maj@8", 3),
    Row("toy-test pass@8", "pass@8", 3),
    Row("toy-test avg@8", "avg@8", 3),
)


def _paec_rows(late: str, steps: int, h_bar: bool = True) -> tuple[Row, ...]:
    """PAEC's quantities; ``h_bar=False`` where the GRPO arm logs no H̄ (the 60-step study's GRPO runs through
    AEPO's hooks, the long study's through PAEC's with α = λ_ent = 0)."""
    rel = "relative change (first 10 → last 10 steps)"
    floor = (
        Row(f"H̄, {rel}", f"H̄, {rel}", 3),
        Row("H̄ / H_low, last 10 steps", "H̄ / H_low, last 10 steps", 3),
        Row(f"steps with H̄ ≥ H_low (of {steps})", "steps with H̄ ≥ H_low", 2),
    )
    return (floor if h_bar else ()) + (
        Row(f"mean token entropy, {rel}", f"mean token entropy, {rel}", 3),
        Row(f"mean token entropy, {late}", f"mean token entropy, {late}", 3),
        Row(f"rollout accuracy, {late}", f"rollout accuracy, {late}", 3),
    ) + TOY_TEST  # fmt: skip


def paec_scope_table(summary: dict) -> list[str]:
    """PAEC's two H̄ scopes (studies/paec_scope.py): the gate's activity under each reading, one run each."""
    lines = [
        "| `paec.hbar_scope` | optimiser steps with the gate open | RL steps where it opened | H_low |",
        "|---|---|---|---|",
    ]
    for scope, run in summary["scopes"].items():
        opened = run["rl_steps_gate_open"]
        where = f"{len(opened)} of {run['steps']}" + (f" ({', '.join(map(str, opened))})" if opened else "")
        h_low = "—" if run["h_low"] is None else f"{run['h_low']:.4f}"
        lines.append(_row(f"`{scope}`", f"{100 * run['optimiser_steps_gate_open']:.1f} %", where, h_low))
    return lines


RECIPES = (  # the recipes study's arms (studies/recipes.yaml): recipe file and ARES table 5 row
    ("aepo", "toy-aepo.yaml", "ARES (full)"),
    ("aepo_shaping_only", "toy-aepo-shaping-only.yaml", "Cold Start + Entropy Shaping"),
    ("aepo_kl_only", "toy-aepo-kl-only.yaml", "Cold Start + Dynamic KL"),
    ("aepo_neither", "toy-aepo-neither.yaml", "Cold Start + GRPO"),
    ("grpo", "toy-grpo.yaml", "—"),
    ("paec", "toy-paec.yaml", "—"),
)


def recipes_table(summary: dict) -> list[str]:
    """The 80-step toy recipes (studies/summarize_recipes.py): toy-val before → after and toy-test avg@K /
    pass@K as means over seeds, and the paired per-problem difference against the baseline arm, pooled over
    seeds (± SE over problems) and per seed."""
    first = next(iter(summary["arms"].values()))
    avg, pas = (next(k for k in first if k.startswith(p)) for p in ("avg@", "pass@"))
    lines = [
        f"| recipe | ARES table 5 row | toy-val before → after | toy-test {avg} | {pas} | "
        f"Δ {avg} vs {summary['baseline']} (± SE) | Δ per seed |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, recipe, row in RECIPES:
        e = summary["arms"][arm]
        pooled, per_seed = e["delta_pooled"], e["delta_per_seed"].values()
        delta = (
            "0" if arm == summary["baseline"] else f"{_signed(pooled['delta'], 3)} ± {_fmt(pooled['se'], 3)}"
        )
        lines.append(
            _row(f"`{recipe}`", row, f"{_fmt(e['val_before']['mean'], 4)} → {_fmt(e['val_after']['mean'], 4)}",
                 _fmt(e[avg]["mean"], 3), _fmt(e[pas]["mean"], 3), delta,
                 ", ".join(_signed(d["delta"], 3) for d in per_seed))
        )  # fmt: skip
    return lines


STUDY_TABLES: dict[str, dict[str, Callable[[dict], list[str]] | PairedTable]] = {
    "mechanisms.json": {
        "aepo_shaping": PairedTable(
            arm="aepo_shaping",
            header="| quantity (steps 31–60) | GRPO | AEPO shaping | paired Δ | Δ per seed |",
            rows=(
                Row("hard bucket: N_HE per response", f"hard N_HE, {LATE}", 2),
                Row("hard bucket: response length (tokens)", f"hard response length, {LATE}", 1),
                Row("easy bucket: response length (tokens)", f"easy response length, {LATE}", 1),
                Row("easy bucket: N_HE per response", f"easy N_HE, {LATE}", 3),
                Row("medium bucket: N_HE per response", f"medium N_HE, {LATE}", 2),
                Row("rollout accuracy", f"rollout accuracy, {LATE}", 3),
            ),
        ),
        "aepo_shaping_easy": PairedTable(
            arm="aepo_shaping_easy",
            header="| quantity (steps 31–60) | GRPO | AEPO easy term | paired Δ | Δ per seed |",
            rows=(
                Row("easy bucket: response length (tokens)", f"easy response length, {LATE}", 1),
                Row("medium bucket: response length", f"medium response length, {LATE}", 1),
                Row("hard bucket: response length", f"hard response length, {LATE}", 1),
                Row("rollout accuracy", f"rollout accuracy, {LATE}", 3),
            ),
        ),
        "aepo_kl": aepo_kl_table,
        "paec": PairedTable(
            arm="paec",
            header="| quantity (60 steps) | GRPO | PAEC (λ_ent = 10) | paired Δ | Δ per seed |",
            rows=_paec_rows(LATE, 60, h_bar=False),
        ),
        "aer": PairedTable(
            arm="aer",
            header="| quantity | GRPO | AER | paired Δ | Δ per seed |",
            rows=(
                Row(f"(H − τH0) / τH0, {LATE}", f"(H − τH0)/τH0, {LATE}", 3),
                Row("steps with H ≥ τH0 (of 60)", "steps with H ≥ τH0 (of 60)", 2),
                Row(f"mean token entropy, {LATE}", f"mean token entropy, {LATE}", 3),
                Row(f"rollout accuracy, {LATE}", f"rollout accuracy, {LATE}", 3),
            ),
        ),
        "branching": PairedTable(
            arm="branching",
            header="| quantity (whole run) | GRPO | GRPO + branching | paired Δ | Δ per seed |",
            rows=(
                Row(
                    "hard prompts: correct per 1k generated tokens",
                    "hard-prompt correct per 1k generated tokens (whole run)",
                    4,
                ),
                Row(
                    "all prompts: correct per 1k generated tokens",
                    "correct per 1k generated tokens (whole run)",
                    2,
                ),
                Row("generated tokens per step", "generated tokens per step (whole run)", 0),
                Row("rollout accuracy (branches included)", "rollout accuracy (whole run)", 3),
            ),  # fmt: skip
        ),
    },
    "paec-scope.json": {"gate": paec_scope_table},
    "recipes.json": {"table5": recipes_table},
    "paec-long.json": {
        "paec": PairedTable(
            arm="paec",
            header="| quantity (150 steps) | GRPO | PAEC (λ_ent = 10) | paired Δ | Δ per seed |",
            rows=_paec_rows(LONG_LATE, 150),
        ),
        "paec_strong": PairedTable(
            arm="paec_strong",
            header="| quantity (150 steps) | GRPO | PAEC (λ_ent = 100) | paired Δ | Δ per seed |",
            rows=_paec_rows(LONG_LATE, 150),
        ),
    },
}
