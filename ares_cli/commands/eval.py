"""``ares eval``: Avg@K, Maj@K, Pass@k with standard errors, lengths, per source and difficulty."""

from __future__ import annotations

from typing import Annotated

import typer

from ares_cli.commands.common import (
    Backend,
    ConfigFile,
    Force,
    Grader,
    Limit,
    MaxNewTokens,
    PromptTemplate,
    Seed,
    SetPairs,
    SystemPrompt,
    Temperature,
    TopP,
    sampling_flags,
)
from ares_cli.console import emit, options


def command(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="Model: artifact id, directory or HF id.")] = None,
    bench: Annotated[list[str] | None, typer.Option(help="Benchmark NAME or NAME:K (repeatable).")] = None,
    k: Annotated[int | None, typer.Option("-k", "--k", help="Samples per problem (default 8).")] = None,
    data: Annotated[
        str | None, typer.Option(help="Problems file for --from-samples (or one more benchmark).")
    ] = None,  # noqa: E501
    from_samples: Annotated[
        str | None,
        typer.Option(
            "--from-samples", help="Grade existing completions (JSONL: problem_id, sample_idx, response)."
        ),
    ] = None,  # noqa: E501
    regrade: Annotated[str | None, typer.Option(help="Re-grade the samples of an eval artifact.")] = None,
    difficulty_from: Annotated[
        str | None, typer.Option("--difficulty-from", help="Passrate artifact giving each problem's bucket.")
    ] = None,  # noqa: E501
    backend: Backend = None,
    temperature: Temperature = None,
    top_p: TopP = None,
    max_new_tokens: MaxNewTokens = None,
    seed: Seed = None,
    system_prompt: SystemPrompt = None,
    prompt_template: PromptTemplate = None,
    limit: Limit = None,
    grader: Grader = None,
    config: ConfigFile = None,
    set_: SetPairs = None,
    force: Force = False,
) -> None:
    """Sample K responses per problem and score them (results.json, results.md, a table on stderr)."""
    from ares_cli import config as cfgmod
    from ares_cli.artifacts import ArtifactStore
    from ares_cli.stages.evaluate import EvalConfig, run_eval

    opts = options(ctx)
    flags = sampling_flags(
        benches=bench or None,
        k=k,
        backend=backend,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
        system_prompt=system_prompt,
        prompt_template=prompt_template,
        limit=limit,
        grader=grader,
    )
    cfg = cfgmod.resolve(EvalConfig, yaml_path=config, sets=set_, flags=flags, section="eval")
    with opts.progress("eval", unit="problems") as progress:
        run, results = run_eval(
            ArtifactStore(opts.artifacts_root),
            model=model,
            cfg=cfg,
            data=data,
            from_samples=from_samples,
            regrade=regrade,
            difficulty_ref=difficulty_from,
            force=force,
            log=lambda m: opts.log(m),
            progress=progress,
        )
    opts.log(f"eval: {'up to date' if run.up_to_date else 'done'} {run.artifact_id}")
    if opts.verbosity >= 0:
        _print_tables(opts, results)
    flat = {"path": str(run.final_dir), "artifact_id": run.artifact_id, "up_to_date": run.up_to_date}
    if len(results) == 1:
        flat |= next(iter(results.values()))["overall"]
    flat["benches"] = {name: r["overall"] for name, r in results.items()}
    emit(opts, flat)


def _print_tables(opts, results) -> None:
    from rich.table import Table

    from ares_cli.stages.evaluate import headline_columns

    for name, result in results.items():
        k = int(result["overall"]["k"])
        cols = headline_columns(result["overall"])
        table = Table(title=f"{name} (K={k})")
        table.add_column("group")
        for c in cols:
            table.add_column(c, justify="right")
        groups = [("all", result["overall"])] + [
            (f"d={d}", m) for d, m in result.get("by_difficulty", {}).items()
        ]
        for label, m in groups:
            table.add_row(label, *[f"{m[c]:.3f}" for c in cols])
        opts.console.print(table)
