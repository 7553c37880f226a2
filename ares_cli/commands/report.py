"""``ares report``: tables and figures over artifacts (compare, plot, html, pipeline)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ares_cli.console import emit, options
from ares_cli.errors import StageFailure, UsageError

app = typer.Typer(
    help="Tables, figures and a report page over artifacts and pipelines.", no_args_is_help=True
)


@app.command("compare")
def compare_command(
    ctx: typer.Context,
    evals: Annotated[
        list[str],
        typer.Argument(help="LABEL=ARTIFACT pairs: eval artifacts, or suite artifacts (id or directory)."),
    ],
    bench: Annotated[
        str | None, typer.Option(help="Benchmark name (default: each artifact's first).")
    ] = None,
    markdown_out: Annotated[str | None, typer.Option("--markdown", help="Also write the table here.")] = None,
    baseline: Annotated[
        str | None,
        typer.Option(help="A LABEL: add each model's paired accuracy difference against it (± SE)."),
    ] = None,
) -> None:
    """Accuracy and mean length per difficulty, Spearman(length, difficulty), and paired Δ vs a baseline."""
    from ares_cli.report.compare import comparison, markdown, rich_table
    from ares_cli.report.suite_compare import is_suite, suite_comparison, suite_markdown
    from ares_cli.store.artifacts import ArtifactStore, verify_enclosing

    opts = options(ctx)
    if markdown_out and not Path(markdown_out).parent.is_dir():
        raise UsageError(f"--markdown {markdown_out}: directory {Path(markdown_out).parent} does not exist")
    store = ArtifactStore(opts.artifacts_root)
    pairs = {}
    for item in evals:
        label, sep, ref = item.partition("=")
        if not sep or not label or not ref:
            raise UsageError(f"expected LABEL=EVAL_ARTIFACT, got '{item}'")
        if label in pairs:
            raise UsageError(f"label '{label}' is given twice; each LABEL=EVAL_ARTIFACT needs its own label")
        # an eval artifact by id or path, or any directory laid out like one (results.json, samples/);
        # an artifact (or a directory inside one) is verified against its manifest first (exit 4)
        if (Path(ref) / "results.json").is_file():
            verify_enclosing(Path(ref))
            pairs[label] = Path(ref)
        else:
            pairs[label] = store.verified(ref)
    suites = [label for label, directory in pairs.items() if is_suite(directory)]
    if suites:
        if len(suites) != len(pairs):
            raise UsageError("compare suite artifacts with suite artifacts only (or eval artifacts only)")
        if bench is not None:
            raise UsageError("--bench does not apply to suite artifacts (every benchmark is compared)")
        table = suite_comparison(pairs, store.verified, baseline)
        text = suite_markdown(table)
        opts.console.print(text)
    else:
        table = comparison(pairs, bench, baseline)
        for warning in table["warnings"]:
            opts.log(f"warning: {warning}", level=0)
        opts.console.print(rich_table(table))
        text = markdown(table)
    if markdown_out:
        try:
            Path(markdown_out).write_text(text)
        except OSError as err:
            raise StageFailure(f"--markdown {markdown_out}: cannot write ({err.strerror})") from None
    emit(opts, table, text=text)


@app.command("plot")
def plot_command(
    ctx: typer.Context,
    artifacts: Annotated[
        list[str],
        typer.Argument(
            help="[LABEL=]ARTIFACT: ids or directories of rl, sft, eval, suite, passrate, curate."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Directory for the PNG and SVG files.")] = Path(
        "figures"
    ),
) -> None:
    """Figures per artifact kind (PNG + SVG): training curves, controllers, per-difficulty bars, Pass@k."""
    from ares_cli.report.figure_helpers import resolve
    from ares_cli.report.figures import plot_artifacts
    from ares_cli.store.artifacts import ArtifactStore

    opts = options(ctx)
    arts = resolve(ArtifactStore(opts.artifacts_root), artifacts)
    _writable_dir(out, "--out")
    paths = plot_artifacts(arts, out)
    for path in paths:
        opts.log(f"wrote {path}", level=1)
    emit(opts, {"path": str(out), "figures": [str(p) for p in paths]}, text="\n".join(map(str, paths)))


def _writable_dir(path: Path, option: str) -> None:
    """Create ``path`` as a directory now, or a UsageError naming the option (before any figure is drawn)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} is a file; a directory is needed")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"{option} {path}: cannot create the directory ({err.strerror or err})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: the directory is not writable")


def _writable_file(path: Path, option: str) -> None:
    """``path`` can be written as a file (its directory created now), or a UsageError naming the option."""
    if path.is_dir():
        raise UsageError(
            f"{option} {path} is a directory; give the file to write (e.g. {path / 'report.html'})"
        )
    _writable_dir(path.parent, f"{option} {path}: its directory")


def _is_state_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "pipeline.yaml").is_file() or (path / "Makefile").is_file())


@app.command("pipeline")
def pipeline_command(
    ctx: typer.Context,
    state: Annotated[Path, typer.Argument(help="A pipeline's state directory, e.g. build/pipelines/toy.")],
    spec: Annotated[
        Path | None,
        typer.Option("--spec", help="The pipeline file (default: the one the state was rendered from)."),
    ] = None,
) -> None:
    """Stage times and the comparison table of a pipeline run (markdown on stdout, tables on stderr)."""
    from ares_cli.report.pipeline_report import load_run, markdown, rich_tables

    opts = options(ctx)
    run = load_run(state, spec)
    if opts.verbosity >= 0:
        for table in rich_tables(run):
            opts.console.print(table)
    text = markdown(run)
    emit(opts, {"path": str(state), "markdown": text}, text=text)


@app.command("html")
def html_command(
    ctx: typer.Context,
    targets: Annotated[
        list[str],
        typer.Argument(
            help="A pipeline state directory (build/pipelines/NAME), or artifact ids / directories."
        ),
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="The HTML file (default: STATE/report.html or report.html).")
    ] = None,
    spec: Annotated[
        Path | None, typer.Option("--spec", help="The pipeline file of a state directory.")
    ] = None,
) -> None:
    """One self-contained HTML page: stages, comparison, every figure inline, lineage of each model."""
    from ares_cli.report.html import write_report
    from ares_cli.report.pipeline_report import load_run, run_of_artifacts
    from ares_cli.store.artifacts import ArtifactStore

    opts = options(ctx)
    first = Path(targets[0])
    if len(targets) == 1 and _is_state_dir(first):
        run = load_run(first, spec)
        page = out or first / "report.html"
    else:
        if spec is not None:
            raise UsageError("--spec goes with a pipeline state directory, not a list of artifacts")
        store = ArtifactStore(opts.artifacts_root)
        run = run_of_artifacts([store.resolve(t) for t in targets])
        page = out or Path("report.html")
    figures_dir = page.parent / f"{page.stem}-figures"
    _writable_file(page, "--out")
    _writable_dir(figures_dir, f"--out {page}: the figures directory")
    page, figures = write_report(run, page, figures_dir)
    opts.log(
        f"report: {page} ({len(run.stages)} artifacts, {sum(p.suffix == '.png' for p in figures)} figures)"
    )
    emit(opts, {"path": str(page), "figures": [str(p) for p in figures]})
