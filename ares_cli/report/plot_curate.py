"""Plot for AdaCS curation (ARES section 3.1): chosen response length vs pass rate, with L_target."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ares_cli.report.figure_helpers import legend_label, without_mathtext


@without_mathtext
def plot_length_vs_passrate(points: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    """Scatter chosen length vs pass rate (one colour per source) with the L_target line, saved to
    ``path``. matplotlib is imported here and drawn through a bare ``Figure`` with the Agg canvas, so no
    pyplot state or global backend switch is involved; every label is drawn as written (:func:`without_mathtext`)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for source in sorted({str(p["source"]) for p in points}):
        pts = [p for p in points if str(p["source"]) == source]
        dots = ax.scatter(
            [p["pass_rate"] for p in pts],
            [p["n_tokens"] for p in pts],
            s=12,
            alpha=0.6,
            label=legend_label(f"{source} chosen"),
        )
        line = sorted({(p["pass_rate"], p["target_len"]) for p in pts if p["target_len"] is not None})
        if line:
            ax.plot(
                [x for x, _ in line],
                [y for _, y in line],
                color=dots.get_facecolor()[0],
                linewidth=1.5,
                label=legend_label(f"{source} L_target"),
            )
    ax.set_xlabel("pass rate")
    ax.set_ylabel("response tokens")
    ax.set_title("AdaCS: chosen length vs pass rate")
    if points:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
