"""``ares report compare``: eval artifacts side by side."""

from __future__ import annotations

from typing import Annotated

import typer

from ares_cli.console import emit, options
from ares_cli.errors import StageFailure, UsageError

app = typer.Typer(help="Tables over artifacts: compare eval results across models.", no_args_is_help=True)


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
    from pathlib import Path

    from ares_cli.artifacts import ArtifactStore, verify_enclosing
    from ares_cli.report.compare import comparison, markdown, rich_table
    from ares_cli.report.suite_compare import is_suite, suite_comparison, suite_markdown

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
