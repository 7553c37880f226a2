"""``ares curate``: AdaCS length-targeted, bracket-uniform SFT data (ARES section 3.1) as an artifact.

Inputs: pass rates (a passrate artifact or ``--passrates FILE``), candidate responses (the artifact's
samples or ``--responses FILE``; graded with the grading pool when ``correct`` is absent, tokenised with
``--tokenizer`` when ``n_tokens`` is absent) and problem texts (the artifact's problems or ``--data``).
Outputs: ``sft.jsonl``, ``length_vs_passrate.json`` and ``.png``; the curation stats go in the manifest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ares_cli.algorithms.curation import (
    CurationConfig,
    curate,
    length_vs_passrate_points,
    parse_candidates,
    parse_pass_rates,
)
from ares_cli.config import to_dict
from ares_cli.data.jsonl import read_jsonl, write_jsonl
from ares_cli.errors import InputError, StageFailure, UsageError
from ares_cli.store.artifacts import ArtifactStore, InputRef

CODE_VERSION = "1"


def _file(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise InputError("file not found", file=path)
    return path


def load_inputs(
    store: ArtifactStore,
    *,
    passrate: str | None,
    passrates: str | None,
    responses: str | None,
    data: str | None,
    log: Callable[[str], None] = print,
) -> tuple[list[dict], list[dict], dict[str, dict], list[InputRef], Path]:
    """(pass-rate rows, candidate rows, problems by id, input refs, the candidates' file) from an artifact
    and/or files, checked
    against each other before any work: a pass rate for a problem the data lacks is an InputError naming
    its row; responses for problems without a pass rate are left out with a warning (all of them: an
    InputError naming the file and the first ids)."""
    from ares_cli.data.loader import load_problems
    from ares_cli.stages.inputs import dataset_ref

    if (passrate is None) == (passrates is None):
        raise UsageError("give exactly one of --passrate ARTIFACT or --passrates FILE")
    inputs: list[InputRef] = []
    rates, candidates, problems = [], [], {}
    if passrate is not None:
        directory = store.resolve(passrate)
        inputs.append(store.input_ref("passrate", directory))
        rates_file = directory / "passrates.jsonl"
        rates = read_jsonl(rates_file)
        candidates = read_jsonl(directory / "samples.jsonl")
        problems = {str(p["id"]): p for p in read_jsonl(directory / "problems.jsonl")}
    else:
        rates_file = _file(passrates)
        rates = read_jsonl(rates_file)
        inputs.append(store.input_ref("passrates", passrates))
    parse_pass_rates(rates, file=rates_file)  # every bad row named with its file, before any work
    candidates_file: str | Path = Path(passrate or "") / "samples.jsonl"
    if responses is not None:
        candidates_file = _file(responses)
        candidates = read_jsonl(candidates_file)
        inputs.append(store.input_ref("responses", responses))
    if data is not None:
        loaded = load_problems(data)
        problems = {str(p["id"]): p for p in loaded.records}
        inputs.append(dataset_ref(loaded.records, loaded.provenance))
    if not problems:
        raise UsageError("no problem texts: give --data (needed with --passrates)")
    if not candidates:
        raise UsageError("no candidate responses: give --responses (needed with --passrates)")
    _check_ids(rates, rates_file, candidates, candidates_file, problems, log)
    return rates, candidates, problems, inputs, Path(candidates_file)


def _check_ids(rates, rates_file, candidates, candidates_file, problems, log) -> None:
    """Pass rates name problems of the data; responses name problems with a pass rate."""
    for row, rate in enumerate(rates, start=1):
        if str(rate["problem_id"]) not in problems:
            raise InputError(
                f"pass rate for problem {rate['problem_id']!r}, which is not in the problem data",
                file=rates_file, row=row, field="problem_id",
            )  # fmt: skip
    rated = {str(r["problem_id"]) for r in rates}
    for row, cand in enumerate(candidates, start=1):
        if not isinstance(cand, dict):
            raise InputError("a response row must be a JSON object", file=candidates_file, row=row)
        if cand.get("problem_id") is None:
            raise InputError("response without problem_id", file=candidates_file, row=row, field="problem_id")
        if str(cand["problem_id"]) in rated and not isinstance(cand.get("response"), str):
            raise InputError(f"response must be text, got {cand.get('response')!r}", file=candidates_file,
                             row=row, field="response")  # fmt: skip
    unknown = sorted({str(c.get("problem_id")) for c in candidates} - rated)
    if len(unknown) == len({str(c.get("problem_id")) for c in candidates}):
        raise InputError(
            f"no response is for a problem with a pass rate ({len(unknown)} unknown problem ids, e.g. "
            f"{', '.join(map(repr, unknown[:5]))})",
            file=candidates_file, field="problem_id",
        )  # fmt: skip
    if unknown:
        n_rows = sum(str(c.get("problem_id")) in unknown for c in candidates)
        log(
            f"warning: {candidates_file}: {n_rows} response(s) of {len(unknown)} problem(s) without a pass "
            f"rate are left out (e.g. {', '.join(map(repr, unknown[:5]))})"
        )
    # every field a row gives is checked now; what the tokenizer and the grader fill in is not required yet
    parse_candidates(
        [{"n_tokens": 0, "correct": False} | c for c in candidates], file=candidates_file, keep=rated
    )


def complete_candidates(
    candidates: list[dict],
    problems: dict[str, dict],
    *,
    source: str | Path,
    tokenizer: str | None,
    grader: str,
    workers: int,
    timeout_s: float,
    trust_grader_code: bool = False,
    keep: set[str] | None = None,
) -> tuple[list[dict], dict[str, int]]:
    """Fill ``n_tokens`` (tokenizer) and ``correct`` (grading pool) where a candidate row lacks them
    (``keep``: only for these problems' rows)."""

    def kept(c: dict) -> bool:
        return keep is None or str(c.get("problem_id")) in keep

    needs_tokens = [i for i, c in enumerate(candidates) if "n_tokens" not in c and kept(c)]
    if needs_tokens:
        if tokenizer is None:
            raise InputError(
                f"{len(needs_tokens)} responses lack n_tokens; pass --tokenizer",
                file=source,
                row=needs_tokens[0] + 1,
                field="n_tokens",
            )
        from ares_cli.models import load_tokenizer

        tok = load_tokenizer(tokenizer)
        for i in needs_tokens:
            candidates[i] = candidates[i] | {
                "n_tokens": len(tok(candidates[i]["response"], add_special_tokens=False)["input_ids"])
            }
    needs_grade = [i for i, c in enumerate(candidates) if "correct" not in c and "grade" not in c and kept(c)]
    if needs_grade:
        from ares_cli.grading import GradingPool

        for i in needs_grade:
            if str(candidates[i].get("problem_id")) not in problems:
                raise InputError("unknown problem_id", file=source, row=i + 1, field="problem_id")
        with GradingPool(grader, workers=workers, timeout_s=timeout_s, trust_code=trust_grader_code) as pool:
            results = pool.grade(
                [
                    (problems[str(candidates[i]["problem_id"])]["answer"], candidates[i]["response"])
                    for i in needs_grade
                ]
            )
        for i, result in zip(needs_grade, results, strict=True):
            candidates[i] = candidates[i] | {"grade": result.grade}
    return candidates, {"tokenised": len(needs_tokens), "graded": len(needs_grade)}


def run_curate(
    store: ArtifactStore,
    *,
    cfg: CurationConfig,
    passrate: str | None = None,
    passrates: str | None = None,
    responses: str | None = None,
    data: str | None = None,
    tokenizer: str | None = None,
    grader: str = "math_verify",
    trust_grader_code: bool = False,
    force: bool = False,
    log: Callable[[str], None] = print,
):
    """Run (or find up to date) a curate stage; returns (StageRun, stats). ``trust_grader_code`` allows
    a ``module:function`` grader (the user's ``--trust-grader-code``)."""
    from ares_cli.grading.registry import resolve_grader

    resolve_grader(grader, trust_code=trust_grader_code)  # before any input is read
    rates, candidates, problems, inputs, candidates_file = load_inputs(
        store, passrate=passrate, passrates=passrates, responses=responses, data=data, log=log
    )
    config = to_dict(cfg) | {"grader": grader, "tokenizer": tokenizer}
    run = store.open_stage(
        "curate",
        code_version=CODE_VERSION,
        config=config,
        inputs=inputs,
        seeds={"seed": cfg.seed},
        force=force,
    )
    if run.up_to_date:
        return run, store.manifest(run.final_dir)["stats"]
    rated = {str(r["problem_id"]) for r in rates}
    candidates, filled = complete_candidates(
        candidates,
        problems,
        source=candidates_file,
        keep=rated,
        tokenizer=tokenizer,
        grader=grader,
        workers=2,
        timeout_s=10.0,
        trust_grader_code=trust_grader_code,
    )
    prompts = {pid: p["problem"] for pid, p in problems.items()}
    parsed = parse_candidates(candidates, file=candidates_file, keep=rated)  # rows named in their file
    examples, stats = curate(rates, [c for cands in parsed.values() for c in cands], prompts, cfg)
    stats["unknown_candidates"] = sum(str(c.get("problem_id")) not in rated for c in candidates)
    for example in examples:  # image problems keep their images (absolute paths, as loaded)
        images = problems.get(example["problem_id"], {}).get("images")
        if images:
            example["images"] = list(images)
    if not examples:
        raise StageFailure(
            f"curation chose no examples (no problem has a correct candidate): {stats['brackets']}"
        )
    write_jsonl(run.work_dir / "sft.jsonl", examples)
    points = length_vs_passrate_points(examples)
    write_jsonl(run.work_dir / "length_vs_passrate.jsonl", points)
    if points:
        from ares_cli.report.plot_curate import plot_length_vs_passrate

        plot_length_vs_passrate(points, run.work_dir / "length_vs_passrate.png")
    stats = stats | {"filled": filled}
    run.finalize(stats)
    log(f"curate: {len(examples)} examples over {len(stats['brackets'])} brackets")
    return run, stats
