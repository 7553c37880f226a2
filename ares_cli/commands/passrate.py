"""``ares passrate`` and ``ares passrate merge``."""

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
from ares_cli.errors import UsageError

app = typer.Typer(invoke_without_command=True)


@app.callback()
def passrate_command(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="Model: artifact id, directory or HF id.")] = None,
    data: Annotated[
        str | None, typer.Option(help="Dataset: manifest name, JSONL/parquet file or HF id.")
    ] = None,
    k: Annotated[int | None, typer.Option("-k", "--k", help="Samples per problem (default 8).")] = None,
    shard: Annotated[
        str | None, typer.Option(help="Run shard i/n; combine with 'ares passrate merge'.")
    ] = None,
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
    """K samples per problem, graded: pass rates, difficulty buckets and lengths per problem."""
    if ctx.invoked_subcommand is not None:
        return
    from ares_cli.stages.passrate import run_passrate
    from ares_cli.store.artifacts import ArtifactStore

    opts = options(ctx)
    if data is None:
        raise UsageError("--data is required")
    cfg = resolve_config(k=k, shard=shard, backend=backend, temperature=temperature, top_p=top_p,
                         max_new_tokens=max_new_tokens, seed=seed, system_prompt=system_prompt,
                         prompt_template=prompt_template, limit=limit, grader=grader, trust_grader_code=trust_grader_code,
                         config=config, set_=set_)  # fmt: skip
    with opts.progress("passrate", unit="problems") as progress:
        run, stats = run_passrate(
            ArtifactStore(opts.artifacts_root),
            model=model,
            data=data,
            cfg=cfg,
            force=force,
            log=lambda m: opts.log(m),
            progress=progress,
        )
    _report(opts, run, stats)


def resolve_config(*, config=None, set_=None, **flags):
    """The PassrateConfig of these options: defaults < --config < --set < flags (shared with ``ares plan``)."""
    from ares_cli import config as cfgmod
    from ares_cli.stages.passrate import PassrateConfig

    return cfgmod.resolve(PassrateConfig, yaml_path=config, sets=set_, flags=sampling_flags(**flags),
                          section="passrate")  # fmt: skip


@app.command("merge")
def merge_command(
    ctx: typer.Context,
    shards: Annotated[list[str], typer.Argument(help="Shard artifacts (ids or directories).")],
    force: Force = False,
) -> None:
    """Combine 'passrate --shard i/n' artifacts into one, equal in rows to an unsharded run."""
    from ares_cli.stages.passrate import merge_shards
    from ares_cli.store.artifacts import ArtifactStore

    opts = options(ctx)
    run, stats = merge_shards(ArtifactStore(opts.artifacts_root), shards, force=force)
    _report(opts, run, stats)


def _report(opts, run, stats) -> None:
    status = "up to date" if run.up_to_date else "done"
    opts.log(f"passrate: {status} {run.artifact_id}")
    for source, s in stats.get("sources", {}).items():
        fractions = ", ".join(f"{b} {s['bucket_fractions'][b]:.0%}" for b in ("easy", "medium", "hard"))
        opts.log(
            f"  {source}: {s['problems']} problems, mean pass rate {s['pass_rate_mean']:.3f}; {fractions}"
        )
    emit(
        opts,
        {
            "path": str(run.final_dir),
            "artifact_id": run.artifact_id,
            "up_to_date": run.up_to_date,
            "stats": stats,
        },
    )
