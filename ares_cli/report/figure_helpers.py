"""Shared figure helpers below the ``plot_*`` modules: an artifact to plot and its kind, a bare
matplotlib figure (Agg canvas, no pyplot state), PNG + SVG saving and JSONL rows.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from ares_cli.errors import InputError

KINDS = ("rl", "sft", "eval", "suite", "passrate", "curate")
FORMATS = ("png", "svg")
DPI = 110
P = ParamSpec("P")
R = TypeVar("R")


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


def without_mathtext(draw: Callable[P, R]) -> Callable[P, R]:
    """Run ``draw`` with matplotlib's math parsing off: a label with ``$`` (``$\\frac{$``: LaTeX is
    everywhere in math datasets) is drawn as written instead of failing as mathtext. Scoped to the call
    (``rc_context``), so no global matplotlib state changes."""

    @functools.wraps(draw)
    def plain(*args: P.args, **kwargs: P.kwargs) -> R:
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return plain


def legend_label(text: object) -> str:
    """``text`` as a legend entry: matplotlib leaves out labels that start with ``_``, so such a label
    (a source named ``_x``) gets an invisible zero-width space in front and is shown as written."""
    text = str(text)
    return "\u200b" + text if text.startswith("_") else text


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
