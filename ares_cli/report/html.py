"""One self-contained HTML page for a pipeline run (or a list of artifacts): the stage table with times and
artifact ids, the comparison table, every figure inline (PNG data URIs), and the lineage of each model.
No script, no external resource: the file opens from disk with no server and no network."""

from __future__ import annotations

import base64
import html
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ares_cli.report.figure_helpers import Artifact
from ares_cli.report.figures import plot_artifacts
from ares_cli.report.pipeline_report import PipelineRun

MODEL_STAGES = ("toy-init", "sft", "rl")
PLOTTED = ("rl", "sft", "passrate", "curate", "suite")

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0; } caption { text-align: left; color: #555; padding: .3em 0; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; white-space: nowrap; }
td.num, th.num { text-align: right; } td.id { font-family: monospace; }
.scroll { overflow-x: auto; }
tr.total td { font-weight: bold; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-family: monospace; }
ul.lineage, ul.lineage ul { list-style: none; padding-left: 1.2em; border-left: 1px dotted #bbb; }
.role { color: #777; } .stage { color: #0a5; font-weight: bold; } .sha { color: #999; font-family: monospace; }
nav a { margin-right: 1em; }
"""


def figures_for_run(run: PipelineRun, out_dir: Path) -> list[Path]:
    """Plot every rl, sft, passrate, curate and suite stage, and the compared evals (or every eval stage)."""
    arts = [Artifact(s.name, s.stage, s.path) for s in run.stages if s.stage in PLOTTED]
    evals = run.compare or {s.name: s.path for s in run.stages if s.stage == "eval"}
    arts += [Artifact(label, "eval", Path(path)) for label, path in evals.items()]
    return plot_artifacts(arts, out_dir)


def render(
    run: PipelineRun, figures: list[Path], lineages: dict[str, dict[str, Any]], comparison=None
) -> str:
    """The page's HTML (pure, given the figures on disk)."""
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>ares report: {e(run.name)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>ares report: {e(run.name)}</h1>",
        f"<p>Generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC} from {len(run.stages)} artifact(s).</p>",
        '<nav><a href="#stages">stages</a><a href="#comparison">comparison</a>'
        '<a href="#figures">figures</a><a href="#lineage">lineage</a></nav>',
        '<h2 id="stages">Stages</h2>',
        _stage_table(run),
        '<h2 id="comparison">Comparison</h2>',
        _comparison_table(comparison) if comparison else "<p>No eval stages to compare.</p>",
        '<h2 id="figures">Figures</h2>',
    ]
    pngs = [p for p in figures if p.suffix == ".png"]
    for path in pngs:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{e(path.stem)}">'
            f"<figcaption>{e(path.stem)}</figcaption></figure>"
        )
    if not pngs:
        parts.append("<p>No figures.</p>")
    parts.append('<h2 id="lineage">Lineage of each model</h2>')
    for name, tree in lineages.items():
        parts.append(f'<h3>{e(name)}</h3><ul class="lineage">{_tree(tree)}</ul>')
    if not lineages:
        parts.append("<p>No model artifacts.</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _stage_table(run: PipelineRun) -> str:
    e = html.escape
    rows = [
        f'<tr><td>{e(s.name)}</td><td>{e(s.verb)}</td><td class="id">{e(s.artifact_id)}</td>'
        f'<td class="num">{s.seconds:.1f}</td></tr>'
        for s in run.stages
    ]
    return (
        "<table><caption>Each stage's artifact and its run time (from its manifest).</caption>"
        '<tr><th>stage</th><th>verb</th><th>artifact</th><th class="num">seconds</th></tr>'
        + "".join(rows)
        + f'<tr class="total"><td>total</td><td></td><td></td><td class="num">{run.total_seconds:.1f}</td></tr>'
        "</table>"
    )


def _comparison_table(table: dict[str, Any]) -> str:
    e = html.escape
    levels = table["levels"]
    head = "".join(f'<th class="num">d={e(str(lv))}</th>' for lv in levels)
    rows = []
    for label, m in table["models"].items():
        cells = "".join(
            f'<td class="num">{m["by_difficulty"][lv]["acc"]:.2f} / {m["by_difficulty"][lv]["len"]:.0f}</td>'
            if lv in m["by_difficulty"]
            else '<td class="num">-</td>'
            for lv in levels
        )
        rho = m["spearman_len_difficulty"]
        se = m.get("acc_se")
        acc = f"{m['acc']:.3f}" + (f" ± {se:.3f}" if isinstance(se, float) and math.isfinite(se) else "")
        rows.append(
            f'<tr><td>{e(label)}</td>{cells}<td class="num">{acc} / {m["len"]:.0f}</td>'
            f'<td class="num">{"-" if math.isnan(rho) else f"{rho:.3f}"}</td></tr>'
        )
    return (
        '<div class="scroll"><table><caption>Accuracy (avg@K) / mean response length in tokens, per '
        "difficulty; all: avg@K ± SE / length; rho: Spearman correlation of length with difficulty.</caption>"
        f'<tr><th>model</th>{head}<th class="num">all</th><th class="num">rho(len,d)</th></tr>'
        + "".join(rows)
        + "</table></div>"
    )


def _tree(node: dict[str, Any]) -> str:
    e = html.escape
    if "stage" in node:
        label = f'<span class="stage">{e(node["stage"])}</span> <code>{e(node["artifact_id"])}</code>'
    else:
        label = f"<code>{e(Path(node['path']).name)}</code>"
    role = f'<span class="role">{e(node["role"])}:</span> ' if node.get("role") else ""
    sha = f' <span class="sha">{e(node["sha256"][:12])}</span>' if node.get("sha256") else ""
    missing = " (missing)" if node.get("missing") else ""
    missing += f" ({e(str(node['corrupt']))})" if node.get("corrupt") else ""
    children = "".join(_tree(child) for child in node.get("inputs", []))
    return f"<li>{role}{label}{sha}{missing}" + (f"<ul>{children}</ul>" if children else "") + "</li>"


def lineages(run: PipelineRun) -> dict[str, dict[str, Any]]:
    """The input tree of every model artifact of the run (toy-init, sft, rl), by stage name."""
    from ares_cli.store.artifacts import ArtifactStore

    out = {}
    for s in run.stages:
        if s.stage in MODEL_STAGES:
            out[s.name] = ArtifactStore(s.path.parent.parent).lineage(s.path)
    return out


def write_report(run: PipelineRun, out: Path, figures_dir: Path) -> tuple[Path, list[Path]]:
    """Plot, then write the page; returns (page, figures)."""
    from ares_cli.report.compare import comparison

    figures = figures_for_run(run, figures_dir)
    table = comparison(run.compare) if run.compare else None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(run, figures, lineages(run), table), encoding="utf-8")
    return out, figures
