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
from pathlib import Path
from typing import Any

from ares_cli.config import option
from ares_cli.data.jsonl import read_jsonl, write_jsonl
from ares_cli.errors import InputError, UsageError
from ares_cli.stages.sampling import MAX_K, SAMPLE_KEY, SamplingConfig
from ares_cli.store.artifacts import ArtifactStore, InputRef
from ares_cli.store.hashing import strict_json

CODE_VERSION = "1"
EVAL_BUDGET = 8192  # PAEC's evaluation budget, when neither the user nor the model sets one


@dataclass(frozen=True)
class EvalConfig(SamplingConfig):
    """Evaluation (PAEC appendix: temperature 0.6, top-p 0.7, seed 42, 8192 new tokens)."""

    temperature: float = option(0.6, "Sampling temperature (PAEC evaluation: 0.6).", ge=0.0)
    top_p: float = option(0.7, "Nucleus mass (PAEC evaluation: 0.7).", gt=0.0, le=1.0)
    seed: int = option(42, "Base seed (PAEC evaluation: 42).")
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


def parse_bench(spec: str, default_k: int) -> tuple[str, int]:
    """``math500:8`` → ("math500", 8); ``toy-test`` → ("toy-test", default_k)."""
    name, _, k = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if not name:
        return spec, default_k
    try:
        value = int(k)
    except ValueError:
        return spec, default_k  # a colon that is part of a name (hf:org/x)
    if not 1 <= value <= MAX_K:
        raise UsageError(f"--bench {spec}: K must be >= 1 and <= {MAX_K}")
    return name, value


def bench_name(source: str) -> str:
    """A filesystem-safe label for a benchmark source."""
    return Path(source).stem if Path(source).suffix else source.replace("/", "_").replace(":", "_")


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
    from ares_cli.scoring import aggregations, metrics

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
            result["aggregate"] = aggregations.aggregate(aggregate, problems, samples, k)
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


def difficulty_from_passrate(store: ArtifactStore, ref: str) -> tuple[dict[str, str], InputRef]:
    """Problem id → bucket from a passrate artifact (for benchmarks without difficulty metadata)."""
    input_ref = store.input_ref("difficulty", ref)  # verified before it is read
    rows = read_jsonl(Path(input_ref.path) / "passrates.jsonl")
    return {r["problem_id"]: r["bucket"] for r in rows}, input_ref


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
    from ares_cli.stages.judging import load_verdicts, save_verdicts
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
    stats = {"benches": overall, "timing": timing, "skipped_long_prompts": skipped,
             "generation_budget": budget.record()}  # fmt: skip
    if judge is not None:
        stats["judge"] = save_verdicts(judge, run.work_dir)
    run.finalize(stats)
    return run, results


def bench_plan(store, cfg: EvalConfig, *, data, from_samples, regrade) -> list[dict[str, Any]]:
    if regrade is not None:
        directory = store.verified(regrade)
        manifest = store.manifest(directory)
        if manifest["stage"] != "eval":
            raise InputError(f"{manifest['artifact_id']} is not an eval artifact")
        plans = []
        earlier = manifest["config"]
        for spec in earlier["benches"]:
            name, k = parse_bench(spec, cfg.k)
            plans.append(
                {
                    "name": name,
                    "k": k,
                    "source": str(directory / "problems" / f"{name}.jsonl"),
                    "replay": str(directory / "samples" / f"{name}.jsonl"),
                    "grader": (earlier.get("graders") or {}).get(name) or earlier.get("grader"),
                    "aggregate": (earlier.get("aggregates") or {}).get(name),
                }
            )
        return plans
    if from_samples is not None:
        if data is None:
            raise UsageError("--from-samples needs --data (the problems the samples answer)")
        path = Path(from_samples)
        if not path.is_file():
            raise InputError("file not found", file=path)
        counts: dict[str, int] = {}
        for row in read_jsonl(path):
            counts[str(row.get("problem_id"))] = counts.get(str(row.get("problem_id")), 0) + 1
        if not counts:
            raise InputError("no samples", file=path)
        k = min(counts.values())
        if k != max(counts.values()):  # scoring on the minimum would drop samples silently
            fewest = sorted(pid for pid, n in counts.items() if n == k)[:5]
            raise InputError(
                f"unequal sample counts per problem ({k} to {max(counts.values())}; {k} for {fewest}): "
                "every problem needs the same number of samples",
                file=path,
            )
        return [{"name": bench_name(data), "k": k, "source": data, "replay": str(path)}]
    specs = list(cfg.benches) + ([data] if data else [])
    if not specs:
        raise UsageError("name at least one --bench (or --data)")
    plans = []
    for spec in specs:
        source, k = parse_bench(spec, cfg.k)
        plans.append({"name": bench_name(source), "k": k, "source": source})
    if len({p["name"] for p in plans}) != len(plans):
        raise UsageError("a benchmark is named twice")
    return plans


def check_golds(problems: list[dict], grader: str, source: str) -> None:
    """A choice grader needs every gold to name an option: report each one that does not (exit 3)."""
    from ares_cli.grading import resolve_grader
    from ares_cli.grading.judge import parse_judge_grader

    if parse_judge_grader(grader) or not resolve_grader(grader).with_options:
        return
    from ares_cli.errors import InputErrors
    from ares_cli.grading.choice import choice_gold, gold_letter, parse_options

    errors = []
    for p in problems:
        try:
            gold_letter(choice_gold(p["answer"], parse_options((p.get("meta") or {}).get("options"))))
        except ValueError as exc:
            errors.append(InputError(f"problem {p['id']}: {exc}", file=source, field="answer"))
    if errors:
        raise InputErrors(errors)


def _sample_and_vote(problems, rows, cfg: EvalConfig, model_path, progress, judge=None) -> dict[str, float]:
    """Generate and grade missing samples, then add each sample's vote class (verified equivalence)."""
    from ares_cli.grading.judged import open_grading
    from ares_cli.stages.sampling import most_images, open_backend, sample_and_grade

    grading = open_grading(cfg.grader, workers=cfg.grade_workers, timeout_s=cfg.grade_timeout_s, judge=judge)
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
