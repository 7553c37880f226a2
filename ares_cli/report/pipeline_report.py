"""What a pipeline run produced: its stages (verb, artifact, seconds), the comparison of its eval stages,
and the artifacts to plot — read from a state directory (``build/pipelines/<name>``) or a list of artifacts.

The state directory holds ``<stage>.id`` files (the artifact path of each stage) and ``pipeline.yaml`` (the
spec it was rendered from; older state directories name it in their Makefile's first line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError

SPEC_COPY = "pipeline.yaml"


@dataclass
class StageRow:
    name: str
    verb: str
    artifact_id: str
    path: Path
    seconds: float
    stage: str


@dataclass
class PipelineRun:
    """The stages of a run (in spec order), its eval comparison labels, and where to find it."""

    name: str
    stages: list[StageRow]
    compare: dict[str, Path] = field(default_factory=dict)

    @property
    def total_seconds(self) -> float:
        return sum(s.seconds for s in self.stages)


def spec_of_state(state: Path) -> Path:
    """The pipeline file a state directory was rendered from."""
    copy = state / SPEC_COPY
    if copy.is_file():
        return copy
    makefile = state / "Makefile"
    if makefile.is_file():
        first = makefile.read_text().splitlines()[0]
        if first.startswith("# Generated from ") and " by " in first:
            spec = Path(first[len("# Generated from ") :].split(" by ")[0])
            if spec.is_file():
                return spec
    raise InputError("not a pipeline state directory (no pipeline.yaml or generated Makefile)", file=state)


def _manifest(directory: Path, stage_name: str) -> dict[str, Any]:
    """The manifest of a stage's artifact, after checking its files against it (IntegrityError, exit 4)."""
    from ares_cli.store.artifacts import ArtifactStore

    path = directory / "manifest.json"
    if not path.is_file():
        raise InputError(f"stage '{stage_name}': artifact has no manifest.json", file=directory)
    ArtifactStore(directory.parent.parent).verified(directory)
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise InputError(f"stage '{stage_name}': unreadable manifest ({err})", file=path) from None


def load_run(state: str | Path, spec_path: str | Path | None = None) -> PipelineRun:
    """Every stage of the pipeline with its artifact; InputError naming the first stage that has not run."""
    from ares_cli.pipeline import load_pipeline

    state = Path(state)
    spec_path = Path(spec_path) if spec_path is not None else spec_of_state(state)
    spec = load_pipeline(spec_path)
    rows = []
    for name, stage in spec["stages"].items():
        id_file = state / f"{name}.id"
        if not id_file.is_file():
            raise InputError(f"stage '{name}' has not run (no {id_file.name})", file=state)
        directory = Path(id_file.read_text().strip())
        manifest = _manifest(directory, name)
        rows.append(StageRow(name, stage["run"], directory.name, directory,
                             float(manifest.get("duration_s", 0.0)), manifest.get("stage", "")))  # fmt: skip
    by_name = {row.name: row for row in rows}
    compare = {}
    for label, stage_name in ((spec.get("report") or {}).get("compare") or {}).items():
        if stage_name not in by_name:
            raise InputError(
                f"'{stage_name}' is not a stage", file=spec_path, field=f"report.compare.{label}"
            )
        compare[label] = by_name[stage_name].path
    return PipelineRun(spec.get("name", spec_path.stem), rows, compare)


def run_of_artifacts(directories: list[Path]) -> PipelineRun:
    """A report over loose artifacts: one row each, every eval compared under its artifact id."""
    rows = []
    for directory in directories:
        manifest = _manifest(directory, directory.name)
        rows.append(StageRow(directory.name, manifest.get("stage", ""), directory.name, directory,
                             float(manifest.get("duration_s", 0.0)), manifest.get("stage", "")))  # fmt: skip
    compare = {row.artifact_id: row.path for row in rows if row.stage == "eval"}
    return PipelineRun("artifacts", rows, compare)


def markdown(run: PipelineRun) -> str:
    """Stage times and the comparison table, as markdown."""
    from ares_cli.report.compare import comparison
    from ares_cli.report.compare import markdown as compare_markdown

    lines = ["| stage | artifact | seconds |", "|---|---|---|"]
    lines += [f"| {s.name} | {s.artifact_id} | {s.seconds:.1f} |" for s in run.stages]
    lines.append(f"| total | | {run.total_seconds:.1f} |")
    text = "\n".join(lines) + "\n"
    if run.compare:
        text += "\n" + compare_markdown(comparison(run.compare))
    return text


def rich_tables(run: PipelineRun) -> list:
    """The stage table and the comparison as rich Tables (for stderr)."""
    from rich.table import Table

    from ares_cli.report.compare import comparison, rich_table

    times = Table("stage", "verb", "artifact", "seconds", title=f"pipeline {run.name}")
    for s in run.stages:
        times.add_row(s.name, s.verb, s.artifact_id, f"{s.seconds:.1f}")
    times.add_row("total", "", "", f"{run.total_seconds:.1f}")
    return [times] + ([rich_table(comparison(run.compare))] if run.compare else [])
