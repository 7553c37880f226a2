"""``ares passrate``: K graded samples per problem -> pass rates, difficulty buckets and lengths.

Writes ``problems.jsonl`` (the dataset as loaded), ``samples.jsonl`` (one row per problem and sample),
``passrates.jsonl`` and summary statistics in the manifest. ``--shard i/n`` runs every n-th problem;
:func:`merge_shards` combines the shards into one artifact with the same rows as an unsharded run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ares_cli.config import option, to_dict
from ares_cli.data.jsonl import read_jsonl, write_jsonl
from ares_cli.errors import InputError, UsageError
from ares_cli.models.budget import with_budget
from ares_cli.stages.judge_model import JudgeConfig
from ares_cli.stages.sampling import PASSRATE_BUDGET, SAMPLE_KEY, SamplingConfig
from ares_cli.store.artifacts import ArtifactStore, InputRef

CODE_VERSION = "1"
GRADER_LABEL = "grader_label"


@dataclass(frozen=True)
class PassrateConfig(SamplingConfig):
    """Pass-rate estimation (ARES section 3.1): sampling settings plus difficulty-bucket rules."""

    easy_frac: float = option(
        0.75, "Easy when n_correct >= easy_frac*k (6/8; ARES appendix G).", ge=0.0, le=1.0
    )
    hard_frac: float = option(
        0.25, "Hard when n_correct <= hard_frac*k (2/8; ARES appendix G).", ge=0.0, le=1.0
    )
    shard: str | None = option(None, "Run shard i of n ('i/n', every n-th problem from i).")

    def check(self) -> None:
        """The easy and hard buckets may not overlap (eq. 10 needs hard_frac < easy_frac)."""
        super().check()
        if not self.hard_frac < self.easy_frac:
            raise UsageError(
                f"config keys 'hard_frac' {self.hard_frac} and 'easy_frac' {self.easy_frac} overlap: "
                "a problem would be both easy and hard (need hard_frac < easy_frac)"
            )


def parse_shard(spec: str | None) -> tuple[int, int] | None:
    if spec is None:
        return None
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise UsageError(f"--shard expects i/n (e.g. 0/4), got '{spec}'") from None
    if not (count >= 1 and 0 <= index < count):
        raise UsageError(f"--shard {spec}: need 0 <= i < n")
    return index, count


def passrate_records(problems: list[dict[str, Any]], samples: list[dict[str, Any]], cfg: PassrateConfig):
    """One pass-rate record per problem (DESIGN.md schema); k is the number of graded samples."""
    from ares_cli.algorithms.buckets import difficulty_bucket

    by_problem: dict[str, list[dict[str, Any]]] = {}
    for row in samples:
        by_problem.setdefault(row["problem_id"], []).append(row)
    records = []
    for problem in sorted(problems, key=lambda p: p["id"]):
        rows = by_problem.get(problem["id"], [])
        if not rows:
            raise InputError(f"problem {problem['id']} has no samples")
        n_correct = sum(r["grade"] == "correct" for r in rows)
        lengths = [r["n_tokens"] for r in rows]
        records.append({
            "problem_id": problem["id"], "source": problem.get("source", "default"), "k": len(rows),
            "n_correct": n_correct, "pass_rate": n_correct / len(rows),
            "bucket": difficulty_bucket(n_correct, len(rows), cfg.easy_frac, cfg.hard_frac),
            "len_mean": statistics.fmean(lengths), "len_median": float(statistics.median(lengths)),
        })  # fmt: skip
    return records


def summary_stats(records: list[dict[str, Any]], samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per source: pass-rate histogram, bucket fractions, median length of pass-rate 0 and 1 problems,
    and the mean within-problem coefficient of variation of response lengths."""
    lengths: dict[str, list[int]] = {}
    for row in samples:
        lengths.setdefault(row["problem_id"], []).append(row["n_tokens"])
    per_source: dict[str, Any] = {}
    for source in sorted({r["source"] for r in records}):
        recs = [r for r in records if r["source"] == source]
        hist: dict[str, int] = {}
        for r in sorted(recs, key=lambda r: r["n_correct"]):
            label = f"{r['n_correct']}/{r['k']}"
            hist[label] = hist.get(label, 0) + 1
        buckets = {b: sum(r["bucket"] == b for r in recs) / len(recs) for b in ("easy", "medium", "hard")}
        cvs = [
            statistics.pstdev(v) / statistics.fmean(v)
            for pid in (r["problem_id"] for r in recs)
            if (v := lengths[pid]) and statistics.fmean(v) > 0
        ]

        def median_len(rate: float, recs=recs) -> float | None:
            values = [n for r in recs if r["pass_rate"] == rate for n in lengths[r["problem_id"]]]
            return float(statistics.median(values)) if values else None

        per_source[source] = {
            "problems": len(recs), "pass_rate_mean": statistics.fmean(r["pass_rate"] for r in recs),
            "histogram": hist, "bucket_fractions": buckets, "len_median_pass0": median_len(0.0),
            "len_median_pass1": median_len(1.0), "length_cv_mean": statistics.fmean(cvs) if cvs else None,
        }  # fmt: skip
    grades: dict[str, int] = {}
    for row in samples:
        grades[row["grade"]] = grades.get(row["grade"], 0) + 1
    return {"problems": len(records), "samples": len(samples), "grades": grades, "sources": per_source}


@dataclass
class PreparedPassrate:
    """What :func:`prepare_passrate` found; fields are None where their step failed (plan only)."""

    cfg: Any = None  # with its generation budget resolved
    loaded: Any = None  # LoadedDataset
    problems: list[dict[str, Any]] | None = None  # sorted, this shard's, fitting the context
    skipped: list[str] | None = None  # ids whose prompt does not fit (skip_long_prompts)
    model_path: str | None = None
    budget: Any = None  # models.budget.Budget
    judge: Any = None
    inputs: list[InputRef] | None = None


def prepare_passrate(
    store: ArtifactStore, *, model: str | None, data: str, cfg: PassrateConfig, checks=None,
    hash_inputs: bool = True,
) -> PreparedPassrate:  # fmt: skip
    """Every check the stage makes before it opens its artifact: the data (field map, records), the shard,
    the replay file or the model, images against the model, the judge, the generation budget and every
    prompt against the model's context. ``checks`` (a :class:`~ares_cli.stages.checklist.Checklist`) is
    strict unless ``ares plan`` collects."""
    from ares_cli.data.loader import load_problems
    from ares_cli.models import check_image_support
    from ares_cli.stages.checklist import Checklist
    from ares_cli.stages.inputs import dataset_ref, resolve_model
    from ares_cli.stages.judge_model import prepare_judge
    from ares_cli.stages.sampling import fit_context

    checks = checks or Checklist()
    out = PreparedPassrate(cfg=cfg, inputs=[])
    out.loaded = checks.run(
        "data",
        lambda: load_problems(data, limit=cfg.limit, skip_invalid_rows=cfg.skip_invalid_rows),
        lambda d: f"{len(d)} problems",
    )
    if out.loaded is not None:  # the data's manifest may declare how its benchmark is graded
        from dataclasses import replace

        from ares_cli.grading.declared import grader_for

        cfg = out.cfg = replace(cfg, grader=grader_for(cfg.grader, out.loaded.manifest))
    shard = checks.run("shard", lambda: parse_shard(cfg.shard))
    if out.loaded is not None and hash_inputs:
        out.inputs.append(dataset_ref(out.loaded.records, out.loaded.provenance))
    if cfg.backend == "replay":
        if not cfg.replay_file:
            checks.fail("replay", UsageError("--backend replay needs replay_file (--set replay_file=PATH)"))
        else:
            ref = checks.run("replay", lambda: store.input_ref("completions", cfg.replay_file))
            out.inputs += [ref] if ref is not None else []
    elif model is None:
        checks.fail("model", UsageError("--model is required"))
    if model is not None:
        resolved = checks.run("model", lambda: resolve_model(store, model, hash_files=hash_inputs),
                              lambda r: str(r[0]))  # fmt: skip
        if resolved is not None:
            out.model_path = resolved[0]
            out.inputs += [resolved[1]] if resolved[1] is not None else []
    if out.loaded is not None and cfg.backend != "replay" and out.model_path is not None:
        checks.run("images vs model",
                   lambda: check_image_support(out.loaded.records, out.loaded.locations, out.model_path))  # fmt: skip
    if out.loaded is not None:  # a bad gold must never become a 'hard' problem
        from ares_cli.data.gold_check import check_choice_golds

        checks.run("choice golds", lambda: check_choice_golds(out.loaded.records, cfg.grader, data, cfg.trust_grader_code,
                                                       out.loaded.locations))  # fmt: skip
    judged = checks.run("judge", lambda: prepare_judge(store, [cfg.grader], cfg.judge))
    if judged is not None:
        out.judge, judge_inputs = judged
        out.inputs += judge_inputs
    if cfg.backend != "replay" and out.model_path is None:
        return out
    out.cfg, out.budget = with_budget(cfg, out.model_path, PASSRATE_BUDGET)
    if out.loaded is None:
        return out
    problems = sorted(out.loaded.records, key=lambda p: p["id"])
    if shard is not None:
        problems = problems[shard[0] :: shard[1]]
    if cfg.backend == "replay" and cfg.replay_file:  # every replayed row checked against the data
        from ares_cli.generation.replay import check_replay

        checks.run("replay rows", lambda: check_replay(
            cfg.replay_file, [p["id"] for p in problems], cfg.k, known=[p["id"] for p in out.loaded.records],
            limited=len(out.loaded.records) == cfg.limit))  # fmt: skip
    context_model = None if cfg.backend == "replay" else out.model_path
    fitted = checks.run("prompts fit", lambda: fit_context(problems, out.cfg, context_model, out.budget),
                        lambda f: f"{len(f[0])} fit, {len(f[1])} skipped")  # fmt: skip
    if fitted is not None:
        out.problems, out.skipped = fitted
    return out


def run_passrate(
    store: ArtifactStore,
    *,
    model: str | None,
    data: str,
    cfg: PassrateConfig,
    force: bool = False,
    log: Callable[[str], None] = print,
    progress: Callable[[int, int, float], None] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Run (or resume, or find up to date) a passrate stage; returns (StageRun, stats).

    ``progress(done, total, seconds)`` is called after each chunk of problems (default: a log line)."""
    from ares_cli.grading.judge_grading import grader_label
    from ares_cli.stages.judge_model import load_verdicts, save_verdicts

    prepared = prepare_passrate(store, model=model, data=data, cfg=cfg)
    cfg, budget, judge, model_path = prepared.cfg, prepared.budget, prepared.judge, prepared.model_path
    problems, skipped = prepared.problems, prepared.skipped
    run = store.open_stage(
        "passrate",
        code_version=CODE_VERSION,
        config=to_dict(cfg)
        | {GRADER_LABEL: grader_label(cfg.grader, trust_code=cfg.trust_grader_code)},  # a new grader re-keys
        inputs=prepared.inputs,
        seeds={"seed": cfg.seed},
        force=force,
    )
    if run.up_to_date:
        return run, store.manifest(run.final_dir)["stats"]
    if skipped:
        log(f"passrate: skipping {len(skipped)} problem(s) whose prompt does not fit the context: {skipped}")
    write_jsonl(run.work_dir / "problems.jsonl", problems)
    rows = run.rows("samples.jsonl", SAMPLE_KEY)
    if run.resumed:
        log(f"passrate: resuming {run.artifact_id} with {len(rows)} samples already graded")
    load_verdicts(judge, run.work_dir)
    stats = _sample(problems, rows, cfg, model_path, progress or _progress_lines(log), judge)
    from ares_cli.stages.inputs import data_stats

    extra = {"timing": stats, "shard": cfg.shard, "skipped_long_prompts": skipped,
             "generation_budget": budget.record(), "data": data_stats(prepared.loaded)}  # fmt: skip
    if judge is not None:
        extra["judge"] = save_verdicts(judge, run.work_dir)
    return run, _finish(run, problems, rows, cfg, extra)


def _finish(run, problems: list[dict], rows, cfg: PassrateConfig, extra: dict[str, Any]) -> dict[str, Any]:
    """Write ``passrates.jsonl`` from the graded samples, then finalize with the summary statistics."""
    samples = list(rows.rows.values())
    records = passrate_records(problems, samples, cfg)
    write_jsonl(run.work_dir / "passrates.jsonl", records)
    summary = summary_stats(records, samples) | extra
    run.finalize(summary)
    return summary


def _progress_lines(log: Callable[[str], None]) -> Callable[[int, int, float], None]:
    return lambda done, total, seconds: log(f"  {done}/{total} problems  {seconds:.1f}s")


def _sample(problems, rows, cfg: SamplingConfig, model_path, progress, judge=None) -> dict[str, float]:
    from ares_cli.data.records import most_images
    from ares_cli.grading.judge_grading import open_grading
    from ares_cli.stages.sampling import open_backend, sample_and_grade

    if all((p["id"], i) in rows for p in problems for i in range(cfg.k)):
        return {"generate_s": 0.0, "grade_s": 0.0, "generated_rows": 0}
    backend = open_backend(cfg, model_path, max_images=most_images(problems))
    grading = open_grading(cfg.grader, workers=cfg.grade_workers, timeout_s=cfg.grade_timeout_s, judge=judge,
                           trust_code=cfg.trust_grader_code)  # fmt: skip
    with grading as pool:
        return sample_and_grade(problems, rows, cfg=cfg, backend=backend, pool=pool, progress=progress)


def merge_shards(store: ArtifactStore, refs: list[str], *, force: bool = False):
    """Combine ``--shard i/n`` artifacts into one artifact equal in rows to an unsharded run."""
    directories = [store.resolve(ref) for ref in refs]  # read where the user pointed, never re-resolved
    manifests = [store.manifest(d) for d in directories]
    for m in manifests:
        if m["stage"] != "passrate" or not m["config"].get("shard"):
            raise InputError(f"{m['artifact_id']} is not a passrate shard")
    base = {k: v for k, v in manifests[0]["config"].items() if k not in ("shard", GRADER_LABEL)}
    label = {k: v for k, v in manifests[0]["config"].items() if k == GRADER_LABEL}
    for m in manifests[1:]:
        if {k: v for k, v in m["config"].items() if k != "shard"} != base | label:
            raise InputError(f"{m['artifact_id']}: config differs from {manifests[0]['artifact_id']}")
        if [i["sha256"] for i in m["inputs"]] != [i["sha256"] for i in manifests[0]["inputs"]]:
            raise InputError(f"{m['artifact_id']}: inputs differ from {manifests[0]['artifact_id']}")
    shards = sorted(parse_shard(m["config"]["shard"]) for m in manifests)
    count = shards[0][1]
    if shards != [(i, count) for i in range(count)]:
        raise InputError(f"shards {[f'{i}/{n}' for i, n in shards]} do not cover 0..{count - 1} of {count}")
    try:  # the stored config is data: built, never checked (nothing it names is imported)
        cfg = PassrateConfig(
            **{**base, "stop": base.get("stop", []), "judge": JudgeConfig(**base.get("judge", {}))}
        )
    except TypeError as err:
        raise InputError(f"{manifests[0]['artifact_id']}: not a passrate config ({err})") from None
    order = sorted(range(len(manifests)), key=lambda i: manifests[i]["config"]["shard"])
    inputs = [store.input_ref(f"shard{n}", directories[i]) for n, i in enumerate(order)]
    run = store.open_stage(
        "passrate",
        code_version=CODE_VERSION,
        config=to_dict(cfg) | label,
        inputs=inputs,
        seeds={"seed": cfg.seed},
        force=force,
    )
    if run.up_to_date:
        return run, store.manifest(run.final_dir)["stats"]
    problems, rows = [], run.rows("samples.jsonl", SAMPLE_KEY)
    for directory in directories:
        problems += read_jsonl(directory / "problems.jsonl")
        rows.write([r for r in read_jsonl(directory / "samples.jsonl") if rows.key(r) not in rows])
    problems.sort(key=lambda p: p["id"])
    write_jsonl(run.work_dir / "problems.jsonl", problems)
    return run, _finish(run, problems, rows, cfg, {"merged_from": [m["artifact_id"] for m in manifests]})
