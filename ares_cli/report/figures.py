"""Figures of artifacts: which family an artifact gets, one matplotlib figure per family, PNG + SVG.

``plot_artifacts`` is what ``ares report plot`` and the demo call. An artifact's kind is its manifest's
``stage`` (a bare directory is recognised by its files); each kind has its family module
(:mod:`.plot_rl`, :mod:`.plot_eval`, :mod:`.plot_passrate`; curate reuses :mod:`ares_cli.report.plot_curate`).
Figures are drawn on a bare ``Figure`` with the Agg canvas: no pyplot state, no global backend switch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError

KINDS = ("rl", "sft", "eval", "suite", "passrate", "curate")
FORMATS = ("png", "svg")
DPI = 110


@dataclass(frozen=True)
class Artifact:
    """An artifact to plot: its label (``LABEL=`` prefix or id), kind and directory."""

    label: str
    kind: str
    path: Path


def artifact_kind(directory: Path) -> str:
    """The stage of ``directory`` (its manifest), or a kind told by its files; InputError otherwise."""
    manifest = directory / "manifest.json"
    if manifest.is_file():
        try:
            stage = json.loads(manifest.read_text()).get("stage")
        except ValueError as err:
            raise InputError(f"unreadable manifest ({err})", file=manifest) from None
        if stage in KINDS:
            return stage
        raise InputError(f"no figures for stage '{stage}' (plottable: {', '.join(KINDS)})", file=manifest)
    files = {p.name for p in directory.iterdir()} if directory.is_dir() else set()
    if "results.json" in files:
        return "suite" if "suite" in json.loads((directory / "results.json").read_text()) else "eval"
    for name, kind in (("passrates.jsonl", "passrate"), ("length_vs_passrate.jsonl", "curate")):
        if name in files:
            return kind
    if "metrics.jsonl" in files:
        return "rl"
    raise InputError("not an artifact directory this can plot (no manifest.json)", file=directory)


def resolve(store, refs: list[str]) -> list[Artifact]:
    """``[LABEL=]ARTIFACT`` references (ids, or directories) -> artifacts with their kinds; an artifact is
    verified against its manifest first (IntegrityError, exit 4)."""
    from ares_cli.store.artifacts import verify_enclosing

    out = []
    for ref in refs:
        label, sep, target = ref.partition("=")
        if not sep:
            label, target = "", ref
        if Path(target).is_dir():
            verify_enclosing(Path(target))
            directory = Path(target)
        else:
            directory = Path(store.verified(target))
        out.append(Artifact(label or _short_id(directory.name), artifact_kind(directory), directory))
    return out


def _short_id(name: str) -> str:
    return name[: -len(".partial")] if name.endswith(".partial") else name


def new_figure(panels: int, *, cols: int = 2, panel_size: tuple[float, float] = (5.2, 3.4), title: str = ""):
    """(figure, axes) with ``panels`` panels in rows of ``cols``; unused grid cells are removed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cols = max(1, min(cols, panels))
    rows = -(-panels // cols)
    fig = Figure(figsize=(panel_size[0] * cols, panel_size[1] * rows + (0.4 if title else 0)))
    FigureCanvasAgg(fig)
    grid = fig.subplots(rows, cols, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for extra in axes[panels:]:
        extra.remove()
    if title:
        fig.suptitle(title, fontsize=11)
    return fig, axes[:panels]


def save(fig, out_dir: Path, stem: str) -> list[Path]:
    """Write ``<stem>.png`` and ``<stem>.svg`` under ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    stem = re.sub(r"[^A-Za-z0-9_.@-]+", "_", stem)
    paths = []
    for fmt in FORMATS:
        path = out_dir / f"{stem}.{fmt}"
        fig.savefig(path, dpi=DPI, metadata={"Date": None} if fmt == "svg" else None)
        paths.append(path)
    return paths


def plot_artifacts(artifacts: list[Artifact], out_dir: str | Path) -> list[Path]:
    """Every figure of every artifact (PNG and SVG), plus comparisons where several share a kind."""
    from ares_cli.report import plot_eval, plot_passrate, plot_rl

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


def read_rows(path: Path) -> list[dict[str, Any]]:
    """A JSONL file's rows; InputError naming the file and line for a bad one."""
    if not path.is_file():
        raise InputError("missing", file=path)
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError as err:
            raise InputError(f"invalid JSON ({err})", file=path, row=number) from None
    return rows
