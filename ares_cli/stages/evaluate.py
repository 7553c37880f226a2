"""``ares eval``: sample K responses per benchmark problem, grade, and score Avg@K, Maj@K and Pass@k.

Per benchmark the artifact holds ``samples/<bench>.jsonl`` (sample rows with the vote class) and
``problems/<bench>.jsonl``; ``results.json`` holds every metric with its standard error, overall and per
source and difficulty, and ``results.md`` a markdown table per benchmark. Completions can come from a model,
from a JSONL of existing completions (``--from-samples``) or from an earlier eval artifact (``--regrade``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ares_cli.config import option, seed_option
from ares_cli.data.jsonl import write_jsonl
from ares_cli.errors import InputError
from ares_cli.stages.prepare_eval import EVAL_BUDGET
from ares_cli.stages.sampling import SAMPLE_KEY, SamplingConfig
from ares_cli.store.artifacts import ArtifactStore
from ares_cli.store.hashing import strict_json

CODE_VERSION = "1"


@dataclass(frozen=True)
class EvalConfig(SamplingConfig):
    """Evaluation (PAEC appendix: temperature 0.6, top-p 0.7, seed 42, 8192 new tokens)."""

    temperature: float = option(0.6, "Sampling temperature (PAEC evaluation: 0.6).", ge=0.0)
    top_p: float = option(0.7, "Nucleus mass (PAEC evaluation: 0.7).", gt=0.0, le=1.0)
    seed: int = seed_option(42, "Base seed (PAEC evaluation: 42).")
    max_new_tokens: int | None = option(
        None,
        f"Generation budget; unset = the model's generation_config.json max_new_tokens, else {EVAL_BUDGET} "
        "(PAEC evaluation).",
        ge=1,
    )
    grader: str | None = option(
        None,
        "Grader name or module:function for every benchmark (default: each manifest's, else math_verify).",
    )
    benches: list[str] = option([], "Benchmarks as NAME or NAME:K (K overrides k for that benchmark).")
    difficulty_key: str = option("difficulty", "Problem meta field used for the per-difficulty breakdown.")


def score_benchmark(
    problems: list[dict],
    samples: list[dict],
    k: int,
    difficulty: dict[str, Any],
    difficulty_key: str,
    aggregate: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Metrics for one benchmark: overall, per source and per difficulty, and the manifest's aggregate
    score (DynaMath worst case, We-Math strict) when it names one (pure)."""
    from ares_cli.scoring import benchmark_scores, metrics

    groups = {}
    for p in problems:
        level = difficulty.get(p["id"], (p.get("meta") or {}).get(difficulty_key))
        groups[p["id"]] = {"source": p.get("source", "default"), "difficulty": level}
    scored = metrics.group_samples(samples, groups=groups)
    result = {"overall": metrics.summarize(scored, k), "by_source": metrics.breakdown(scored, "source", k)}
    if any(g["difficulty"] is not None for g in groups.values()):
        result["by_difficulty"] = metrics.breakdown(scored, "difficulty", k)
    if aggregate:
        try:
            result["aggregate"] = benchmark_scores.aggregate(aggregate, problems, samples, k)
        except ValueError as exc:
            raise InputError(str(exc), field="aggregate") from None
    return result


def headline_columns(overall: dict[str, float]) -> list[str]:
    """The metrics shown in tables: avg@K, maj@K, pass@1, pass@K, mean length, truncation rate."""
    k = int(overall["k"])
    names = dict.fromkeys([f"avg@{k}", f"maj@{k}", "pass@1", f"pass@{k}", "len_mean", "truncation_rate"])
    return [c for c in names if c in overall]


def markdown_table(name: str, result: dict[str, Any]) -> str:
    """A markdown table: one row overall, then per difficulty, with the headline metrics."""
    overall = result["overall"]
    k = int(overall["k"])
    columns = headline_columns(overall)
    lines = [
        f"### {name} (K={k}, {int(overall['n_problems'])} problems)",
        "",
        "| group | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]

    def row(label: str, m: dict[str, float]) -> str:
        cells = []
        for c in columns:
            se = m.get(f"{c}_se")
            cells.append(f"{m[c]:.3f} ± {se:.3f}" if se is not None and se == se else f"{m[c]:.3f}")
        return f"| {label} | " + " | ".join(cells) + " |"

    lines.append(row("all", overall))
    for level, m in result.get("by_difficulty", {}).items():
        lines.append(row(f"difficulty {level}", m))
    agg = result.get("aggregate")
    if agg:
        lines += [
            "",
            f"{agg['kind']} score: {agg['score']:.3f} ± {agg['score_se']:.3f} ({agg['n_groups']} groups)",
        ]
    return "\n".join(lines) + "\n"


def run_eval(
    store: ArtifactStore,
    *,
    model: str | None,
    cfg: EvalConfig,
    data: str | None = None,
    from_samples: str | None = None,
    regrade: str | None = None,
    difficulty_ref: str | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
    progress: Callable[[int, int, float], None] | None = None,
):
    """Run (or resume) an eval stage; returns (StageRun, results dict). ``progress(done, total, seconds)``
    is called after each chunk of problems (default: a log line). Every check runs first
    (:func:`~ares_cli.stages.prepare_eval.prepare_eval`), before the artifact opens."""
    from ares_cli.stages.judge_model import load_verdicts, save_verdicts
    from ares_cli.stages.prepare_eval import prepare_eval

    prepared = prepare_eval(store, model=model, cfg=cfg, data=data, from_samples=from_samples, regrade=regrade,
                            difficulty_ref=difficulty_ref)  # fmt: skip
    cfg, benches, model_path, judge = prepared.cfg, prepared.benches, prepared.model_path, prepared.judge
    budget, difficulty = prepared.budget, prepared.difficulty
    run = store.open_stage(
        "eval", code_version=CODE_VERSION, config=prepared.key_config(), inputs=prepared.inputs,
        seeds={"seed": cfg.seed}, force=force,
    )  # fmt: skip
    if run.up_to_date:
        return run, json.loads((run.final_dir / "results.json").read_text())
    results, tables, timing, kept, skipped = {}, [], {}, prepared.kept, prepared.skipped
    load_verdicts(judge, run.work_dir)
    for plan in benches:
        if skipped[plan["name"]]:
            log(f"eval: {plan['name']}: skipping problems longer than the context: {skipped[plan['name']]}")
    for plan in benches:
        name, k = plan["name"], plan["k"]
        problems = kept[name]
        bench_cfg = replace(cfg, k=k, replay_file=plan.get("replay"), grader=plan["grader"])
        (run.work_dir / "problems").mkdir(exist_ok=True)
        (run.work_dir / "samples").mkdir(exist_ok=True)
        write_jsonl(run.work_dir / "problems" / f"{name}.jsonl", problems)
        rows = run.rows(f"samples/{name}.jsonl", SAMPLE_KEY)
        log(f"eval: {name}: {len(problems)} problems x {k} samples")
        timing[name] = _sample_and_vote(
            problems, rows, bench_cfg, model_path,
            progress or (lambda d, t, s: log(f"  {d}/{t} problems  {s:.1f}s")), judge,
        )  # fmt: skip
        save_verdicts(judge, run.work_dir)
        results[name] = score_benchmark(
            problems, list(rows.rows.values()), k, difficulty, cfg.difficulty_key, plan["aggregate"]
        )
        tables.append(markdown_table(name, results[name]))
    (run.work_dir / "results.json").write_text(
        json.dumps(strict_json(results), indent=2, sort_keys=True) + "\n"
    )
    (run.work_dir / "results.md").write_text("\n".join(tables))
    overall = {n: r["overall"] for n, r in results.items()}
    from ares_cli.stages.inputs import data_stats

    stats = {"benches": overall, "timing": timing, "skipped_long_prompts": skipped,
             "generation_budget": budget.record(),
             "data": {n: data_stats(d) for n, d in prepared.loaded.items()}}  # fmt: skip
    if judge is not None:
        stats["judge"] = save_verdicts(judge, run.work_dir)
    run.finalize(stats)
    return run, results


def _sample_and_vote(problems, rows, cfg: EvalConfig, model_path, progress, judge=None) -> dict[str, float]:
    """Generate and grade missing samples, then add each sample's vote class (verified equivalence)."""
    from ares_cli.data.records import most_images
    from ares_cli.grading.judge_grading import open_grading
    from ares_cli.stages.sampling import open_backend, sample_and_grade

    grading = open_grading(cfg.grader, workers=cfg.grade_workers, timeout_s=cfg.grade_timeout_s, judge=judge,
                           trust_code=cfg.trust_grader_code)  # fmt: skip
    with grading as pool:
        timing = {"generate_s": 0.0, "grade_s": 0.0}
        if not all((p["id"], i) in rows for p in problems for i in range(cfg.k)):
            backend = open_backend(cfg, model_path, max_images=most_images(problems))
            timing = sample_and_grade(
                problems,
                rows,
                cfg=cfg,
                backend=backend,
                pool=pool,
                progress=progress,
            )
        ordered = [[rows.rows[(p["id"], i)] for i in range(cfg.k)] for p in problems]
        hung = [
            r["extracted"] for group in ordered for r in group if r["grade"] == "timeout" and r["extracted"]
        ]
        before, started = dict(pool.stats), time.perf_counter()
        classes = pool.equivalence_classes_batch(
            [[r["extracted"] for r in group] for group in ordered], unverifiable=hung
        )
        timing["vote_s"] = time.perf_counter() - started
        for name in ("graded", "cached", "timeouts", "killed"):  # comparisons verified, cache hits, timed out
            timing[f"vote_{name}"] = pool.stats[name] - before[name]
    for group, ids in zip(ordered, classes, strict=True):
        for row, cls in zip(group, ids, strict=True):
            row["vote_class"] = cls
    return timing
