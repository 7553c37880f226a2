"""``ares curate``: AdaCS length-targeted (or uniform) cold-start SFT data."""

from __future__ import annotations

from typing import Annotated

import typer

from ares_cli.commands.common import ConfigFile, Force, SetPairs, TrustGraderCode, sampling_flags
from ares_cli.console import emit, options


def command(
    ctx: typer.Context,
    passrate: Annotated[
        str | None, typer.Option(help="Passrate artifact: pass rates, samples and problems.")
    ] = None,
    passrates: Annotated[
        str | None, typer.Option(help="Pass rates JSONL (problem_id, source, k, and n_correct or pass_rate).")
    ] = None,  # noqa: E501
    responses: Annotated[
        str | None,
        typer.Option(help="Candidate responses JSONL (problem_id, response, correct?, n_tokens?)."),
    ] = None,  # noqa: E501
    data: Annotated[
        str | None, typer.Option(help="Problems (manifest, file or HF id) for prompts and grading.")
    ] = None,  # noqa: E501
    tokenizer: Annotated[str | None, typer.Option(help="Tokenizer for responses without n_tokens.")] = None,
    mode: Annotated[str | None, typer.Option(help="length (AdaCS) | uniform (ARES-CS-Vanilla).")] = None,
    per_bracket: Annotated[
        int | None, typer.Option("--per-bracket", help="Problems per pass-rate bracket.")
    ] = None,
    size: Annotated[int | None, typer.Option(help="Total examples, split evenly over brackets.")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampling seed.")] = None,
    grader: Annotated[str, typer.Option(help="Grader for responses without 'correct'.")] = "math_verify",
    trust_grader_code: TrustGraderCode = None,
    config: ConfigFile = None,
    set_: SetPairs = None,
    force: Force = False,
) -> None:
    """Choose, per problem, the correct response nearest L_target(p) = (1-p)L(0) + pL(1), uniformly over
    pass-rate brackets (ARES section 3.1)."""
    from ares_cli import config as cfgmod
    from ares_cli.algorithms.curation import CurationConfig
    from ares_cli.stages.curate import run_curate
    from ares_cli.store.artifacts import ArtifactStore

    opts = options(ctx)
    flags = sampling_flags(mode=mode, per_bracket=per_bracket, size=size, seed=seed)
    cfg = cfgmod.resolve(CurationConfig, yaml_path=config, sets=set_, flags=flags, section="curate")
    run, stats = run_curate(
        ArtifactStore(opts.artifacts_root),
        cfg=cfg,
        passrate=passrate,
        passrates=passrates,
        responses=responses,
        data=data,
        tokenizer=tokenizer,
        grader=grader,
        trust_grader_code=bool(trust_grader_code),
        force=force,
        log=lambda m: opts.log(m),
    )
    opts.log(f"curate: {'up to date' if run.up_to_date else 'done'} {run.artifact_id}")
    for label, b in stats.get("brackets", {}).items():
        opts.log(
            f"  {label:>5}: chosen {b['chosen']:>3}/{b['eligible']:>3} eligible  target "
            f"{_fmt(b['target_len_mean'])}  chosen len {_fmt(b['chosen_len_mean'])}",
            level=0,
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


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.1f}"
