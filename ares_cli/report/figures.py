"""Figures of artifacts: which family an artifact gets, one matplotlib figure per family, PNG + SVG.

``plot_artifacts`` is what ``ares report plot`` and the demo call. An artifact's kind is its manifest's
``stage`` (a bare directory is recognised by its files); each kind has its family module
(:mod:`.plot_rl`, :mod:`.plot_eval`, :mod:`.plot_passrate`; curate reuses :mod:`ares_cli.report.plot_curate`).
Figures are drawn on a bare ``Figure`` with the Agg canvas: no pyplot state, no global backend switch.
This module is the dispatcher above the family modules; what they share (the artifact, its kind, the
figure and its saving) lives below them in :mod:`.figure_helpers`.
"""

from __future__ import annotations

from pathlib import Path

from ares_cli.report import plot_eval, plot_passrate, plot_rl
from ares_cli.report.figure_helpers import Artifact, without_mathtext


@without_mathtext
def plot_artifacts(artifacts: list[Artifact], out_dir: str | Path) -> list[Path]:
    """Every figure of every artifact (PNG and SVG), plus comparisons where several share a kind."""
    out_dir = Path(out_dir)
    written: list[Path] = []
    by_kind: dict[str, list[Artifact]] = {}
    for art in artifacts:
        by_kind.setdefault(art.kind, []).append(art)
    # in pipeline order: data, cold start, RL, evaluation
    for art in by_kind.get("passrate", []):
        written += plot_passrate.plot_passrate(art, out_dir)
    for art in by_kind.get("curate", []):
        written += plot_passrate.plot_curate(art, out_dir)
    for art in by_kind.get("sft", []) + by_kind.get("rl", []):
        written += plot_rl.plot_run(art, out_dir)
    if len(by_kind.get("rl", [])) > 1:
        written += plot_rl.plot_runs_compared(by_kind["rl"], out_dir)
    if by_kind.get("eval"):
        written += plot_eval.plot_evals(by_kind["eval"], out_dir)
    if by_kind.get("suite"):
        written += plot_eval.plot_suites(by_kind["suite"], out_dir)
    return written
