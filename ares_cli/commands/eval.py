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
    TrustGraderCode,
    sampling_flags,
)
from ares_cli.console import emit, options


def command(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="Model: artifact id, directory or HF id.")] = None,
    bench: Annotated[list[str] | None, typer.Option(help="Benchmark NAME or NAME:K (repeatable).")] = None,
    suite: Annotated[
        str | None,
        typer.Option(
            help="Evaluation suite: a name in pipelines/suites/ (paec-math, ares-text, ...) or a YAML."
        ),
    ] = None,
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
    trust_grader_code: TrustGraderCode = None,
    config: ConfigFile = None,
    set_: SetPairs = None,
    force: Force = False,
) -> None:
    """Sample K responses per problem and score them (results.json, results.md, a table on stderr)."""
    from ares_cli.stages.evaluate import run_eval
    from ares_cli.store.artifacts import ArtifactStore

    opts = options(ctx)
    flags = eval_flags(bench=bench, k=k, backend=backend, temperature=temperature, top_p=top_p,
                       max_new_tokens=max_new_tokens, seed=seed, system_prompt=system_prompt,
                       prompt_template=prompt_template, limit=limit, grader=grader,
                       trust_grader_code=trust_grader_code)  # fmt: skip
    if suite is not None:
        _run_suite(opts, suite, model=model, bench=bench, data=data, replay=from_samples or regrade,
                   config=config, sets=set_, flags=flags, force=force)  # fmt: skip
        return
    cfg = resolve_config(config=config, set_=set_, flags=flags)
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


def eval_flags(*, bench, **values) -> dict:
    """Config keys of the eval options that are set (``--bench`` becomes ``benches``)."""
    return sampling_flags(benches=bench or None, **values)


def resolve_config(*, config, set_, flags: dict, base: dict | None = None, base_file=None):
    """The EvalConfig of these options: defaults < a suite's settings (read from ``base_file``) < --config <
    --set < flags."""
    from ares_cli import config as cfgmod
    from ares_cli.stages.evaluate import EvalConfig

    return cfgmod.resolve(EvalConfig, yaml_path=config, sets=set_, flags=flags, section="eval", base=base,
                          base_file=base_file)  # fmt: skip


def suite_spec(name, *, model, bench, data, replay, flags):
    """The suite named ``name``, after the option rules of ``--suite`` (shared with ``ares plan eval``)."""
    from ares_cli.errors import UsageError
    from ares_cli.stages.suite import load_suite

    if bench or data or replay:
        raise UsageError("--suite names its own benchmarks: drop --bench/--data/--from-samples/--regrade")
    if model is None:
        raise UsageError("--suite needs --model")
    if flags.get("k") is not None:
        raise UsageError("--suite sets K per benchmark: drop -k")
    return load_suite(name)


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


def _run_suite(opts, name, *, model, bench, data, replay, config, sets, flags, force) -> None:
    """``ares eval --suite NAME``: one eval artifact per benchmark, then the suite artifact and its table."""
    from ares_cli.stages.suite import run_suite
    from ares_cli.store.artifacts import ArtifactStore

    spec = suite_spec(name, model=model, bench=bench, data=data, replay=replay, flags=flags)
    cfg = resolve_config(config=config, set_=sets, flags=flags, base=spec.eval, base_file=spec.path)
    run, table, evals, reused = run_suite(
        ArtifactStore(opts.artifacts_root), spec, model=model, cfg=cfg, force=force, log=lambda m: opts.log(m)
    )
    n_reused = sum(reused.values())
    opts.log(
        f"suite {spec.name}: {'up to date' if run.up_to_date else 'done'} {run.artifact_id} "
        f"({n_reused}/{len(reused)} benchmark evals reused)"
    )
    if opts.verbosity >= 0:
        from rich.table import Table

        out = Table(title=f"suite {spec.name}: {model}")
        out.add_column("column")
        out.add_column("value ± SE", justify="right")
        for c in table["columns"]:
            out.add_row(c["name"], f"{c['value']:.3f} ± {c['se']:.3f}")
        opts.console.print(out)
    flat = {"path": str(run.final_dir), "artifact_id": run.artifact_id, "up_to_date": run.up_to_date,
            "evals": evals, "reused": reused, "columns": {c["name"]: c["value"] for c in table["columns"]}}  # fmt: skip
    emit(opts, flat)
