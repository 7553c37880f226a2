"""Data-side figures: a passrate artifact's pass-rate histogram and bucket shares (ARES section 3.1), and
a curate artifact's chosen length against pass rate with L_target (:mod:`ares_cli.report.plot_curate`)."""

from __future__ import annotations

from pathlib import Path

from ares_cli.report.figure_helpers import Artifact, legend_label, new_figure, read_rows, save

BUCKET_COLORS = {"easy": "tab:green", "medium": "tab:orange", "hard": "tab:red"}


def plot_passrate(art: Artifact, out_dir: Path) -> list[Path]:
    """Per source: how many problems solved c of K times, and the easy / medium / hard shares."""
    records = read_rows(art.path / "passrates.jsonl")
    sources = sorted({str(r.get("source", "default")) for r in records})
    fig, (hist, shares) = new_figure(2, title=f"{art.label}: pass rates ({len(records)} problems)")
    width = 0.8 / max(len(sources), 1)
    k_max = max((int(r["k"]) for r in records), default=0)
    for i, source in enumerate(sources):
        recs = [r for r in records if str(r.get("source", "default")) == source]
        counts = [sum(int(r["n_correct"]) == c for r in recs) for c in range(k_max + 1)]
        xs = [c + (i - (len(sources) - 1) / 2) * width for c in range(k_max + 1)]
        hist.bar(xs, counts, width=width * 0.95, label=legend_label(source))
        bottom = 0.0
        for bucket, color in BUCKET_COLORS.items():
            share = sum(r["bucket"] == bucket for r in recs) / max(len(recs), 1)
            shares.bar(i, share, bottom=bottom, color=color, label=bucket if i == 0 else None)
            if share > 0.04:
                shares.text(i, bottom + share / 2, f"{share:.0%}", ha="center", va="center", fontsize=8)
            bottom += share
    hist.set_xticks(range(k_max + 1), [f"{c}/{k_max}" for c in range(k_max + 1)], fontsize=8)
    hist.set_xlabel("correct samples of K")
    hist.set_ylabel("problems")
    hist.set_title("pass-rate histogram", fontsize=10)
    hist.grid(axis="y", alpha=0.3)
    if len(sources) > 1:
        hist.legend(fontsize=7)
    shares.set_xticks(range(len(sources)), sources)
    shares.set_ylim(0, 1)
    shares.set_ylabel("share of problems")
    shares.set_title("difficulty buckets", fontsize=10)
    shares.legend(fontsize=7)
    return save(fig, out_dir, f"{art.label}-passrate")


def plot_curate(art: Artifact, out_dir: Path) -> list[Path]:
    """Chosen response length against pass rate, with L_target(p) per source (PNG and SVG)."""
    from ares_cli.report.plot_curate import plot_length_vs_passrate

    points = read_rows(art.path / "length_vs_passrate.jsonl")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{art.label}-length_vs_passrate.{fmt}" for fmt in ("png", "svg")]
    for path in paths:
        plot_length_vs_passrate(points, path)
    return paths
