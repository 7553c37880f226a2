"""Evaluation figures of one or several models.

eval, per benchmark: accuracy (avg@K ± SE) and mean response length per difficulty level as grouped bars,
one bar per model (ARES figures 7-8), and Pass@k over k (PAEC figure 5). suite: Maj@K and Avg@K (and any
other column) per benchmark as grouped bars with their standard errors.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError
from ares_cli.report.figure_helpers import Artifact, legend_label, new_figure, save
from ares_cli.report.levels import level_order

_PASS = re.compile(r"^pass@(\d+)$")


def _results(art: Artifact) -> dict[str, Any]:
    path = art.path / "results.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise InputError(f"unreadable results ({err})", file=path) from None


def _grouped_bars(ax, groups: list[str], series: dict[str, list[float | None]], errors=None) -> None:
    """Bars at each group position, one per series (None: no bar)."""
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ys = [v if v is not None else 0.0 for v in values]
        yerr = None
        if errors is not None:
            yerr = [e if e is not None else 0.0 for e in errors[label]]
        ax.bar(xs, ys, width=width * 0.95, label=legend_label(label), yerr=yerr, capsize=1.5 if yerr else 0,
               error_kw={"elinewidth": 0.8, "ecolor": "0.35", "alpha": 0.8})  # fmt: skip
    ax.set_xticks(range(len(groups)), groups)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)


def plot_evals(arts: list[Artifact], out_dir: Path) -> list[Path]:
    """One figure per benchmark, the models side by side."""
    results = {art.label: _results(art) for art in arts}
    benches = list(dict.fromkeys(b for r in results.values() for b in r))
    written: list[Path] = []
    for bench in benches:
        models = {label: r[bench] for label, r in results.items() if bench in r}
        written += _bench_figure(
            bench, models, out_dir, stem=f"{'-'.join(models) if len(models) < 4 else 'eval'}"
        )
    return written


def _bench_figure(bench: str, models: dict[str, dict[str, Any]], out_dir: Path, stem: str) -> list[Path]:
    levels = level_order(lv for m in models.values() for lv in (m.get("by_difficulty") or {}))
    groups = levels + ["all"]
    acc, acc_se, length = {}, {}, {}
    for label, m in models.items():
        k = int(m["overall"]["k"])
        cells = [(m.get("by_difficulty") or {}).get(lv) for lv in levels] + [m["overall"]]
        acc[label] = [c.get(f"avg@{k}") if c else None for c in cells]
        acc_se[label] = [c.get(f"avg@{k}_se") if c else None for c in cells]
        length[label] = [c.get("len_mean") if c else None for c in cells]
    # few difficulty levels: three panels in a row; many (MATH levels, toy difficulties): one per row
    wide = len(groups) * len(models) > 16
    fig, (ax_acc, ax_len, ax_pass) = new_figure(
        3, cols=1 if wide else 3, panel_size=(11.0, 3.2) if wide else (5.2, 3.4),
        title=f"{bench}: {len(models)} model(s)",
    )  # fmt: skip
    _grouped_bars(ax_acc, groups, acc, acc_se)
    ax_acc.set_title("accuracy (avg@K ± SE) per difficulty level", fontsize=10)
    ax_acc.set_ylim(0, 1.05)
    _grouped_bars(ax_len, groups, length)
    ax_len.set_title("mean response length per difficulty", fontsize=10)
    ax_len.set_ylabel("tokens")
    for label, m in models.items():
        ks = sorted((int(g.group(1)), key) for key in m["overall"] if (g := _PASS.match(key)))
        if not ks:
            continue
        xs = [k for k, _ in ks]
        ys = [m["overall"][key] for _, key in ks]
        se = [m["overall"].get(f"{key}_se") or 0.0 for _, key in ks]
        ax_pass.plot(xs, ys, marker="o", markersize=4, label=legend_label(label))
        ax_pass.fill_between(xs, [y - s for y, s in zip(ys, se, strict=True)],
                             [y + s for y, s in zip(ys, se, strict=True)], alpha=0.15)  # fmt: skip
    ax_pass.set_xscale("log", base=2)
    ks_all = sorted(
        {int(g.group(1)) for m in models.values() for key in m["overall"] if (g := _PASS.match(key))}
    )
    ax_pass.set_xticks(ks_all, [str(k) for k in ks_all])
    ax_pass.minorticks_off()
    ax_pass.set_xlabel("k")
    ax_pass.set_title("Pass@k (± SE)", fontsize=10)
    ax_pass.grid(alpha=0.3)
    if ax_pass.get_legend_handles_labels()[0]:
        ax_pass.legend(fontsize=7)
    return save(fig, out_dir, f"{stem}-{bench}")


def plot_suites(arts: list[Artifact], out_dir: Path) -> list[Path]:
    """Per benchmark, each suite column (Maj@K, Avg@K, ...) as grouped bars, the models side by side."""
    tables = {art.label: _results(art) for art in arts}
    columns = list(dict.fromkeys(c["name"] for t in tables.values() for c in t.get("columns", [])))
    if not columns:
        raise InputError("suite results hold no columns", file=arts[0].path / "results.json")
    values = {label: [None] * len(columns) for label in tables}
    errors = {label: [None] * len(columns) for label in tables}
    for label, table in tables.items():
        for col in table.get("columns", []):
            values[label][columns.index(col["name"])] = col.get("value")
            errors[label][columns.index(col["name"])] = col.get("se")
    names = sorted({t.get("suite", "suite") for t in tables.values()})
    fig, (ax,) = new_figure(1, panel_size=(max(6.0, 0.9 * len(columns) * max(len(tables), 1) ** 0.5), 4.0),
                            title=f"suite {', '.join(names)}: each benchmark's Maj@K / Avg@K / pass@k (± SE)")  # fmt: skip
    _grouped_bars(ax, columns, values, errors)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax.set_ylabel("accuracy")
    return save(fig, out_dir, f"suite-{'-'.join(names)}")
