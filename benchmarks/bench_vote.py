"""Majority-vote cost with pathological answers: the eval stage versus a re-verifying vote. Prints JSON.

    .venv/bin/python benchmarks/bench_vote.py [--problems 250] [--k 8] [--pathological 0.05] [--timeout-s 1]

The load case of the robustness review: 2,000 samples (250 problems x 8), 5% of them an answer that hangs
math-verify (a power tower sympy tries to evaluate; only the hard timeout ends it). ``eval`` runs through
``ares_cli.stages.evaluate.run_eval`` with ``--from-samples`` (the replay backend), so its numbers are the
ones a user sees in ``stats.timing``: grading time, the vote's time and how many comparisons the vote
verified, took from the cache, or lost to a timeout. The reference grades the same samples in a fresh pool
and then votes with ``retry_timed_out=True``: every comparison with a hung answer is tried again, as the vote
did before answers that timed out were remembered. Seeded (``--seed``); the load average is printed because
other jobs on the cores slow both sides alike.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import tempfile
import time
from pathlib import Path


def make_case(problems: int, k: int, frac: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Problems with integer answers and K replayed responses each; ``frac`` of all samples pathological."""
    rng = random.Random(seed)
    golds = [rng.randint(2, 999) for _ in range(problems)]
    rows = []
    for p, gold in enumerate(golds):
        for i in range(k):
            roll = rng.random()
            answer = (
                str(gold)
                if roll < 0.55
                else f"\\frac{{{2 * gold}}}{{2}}"
                if roll < 0.7
                else str(gold + rng.randint(1, 3))
            )
            rows.append({"problem_id": f"p{p:04d}", "sample_idx": i, "answer": answer})
    for row in rng.sample(rows, round(frac * len(rows))):
        row["answer"] = f"{rng.randint(5, 9)}^{{{rng.randint(5, 9)}^{{{rng.randint(5, 9)}^{{9^9}}}}}}"
    problem_rows = [
        {"id": f"p{p:04d}", "problem": f"Problem {p}?", "answer": str(g)} for p, g in enumerate(golds)
    ]
    samples = [
        {"problem_id": r["problem_id"], "sample_idx": r["sample_idx"], "n_tokens": 12,
         "response": f"The result is \\boxed{{{r['answer']}}}."}
        for r in rows
    ]  # fmt: skip
    return problem_rows, samples


def bench_stage(tmp: Path, problems: Path, samples: Path, workers: int, timeout_s: float) -> dict:
    from ares_cli.stages.evaluate import EvalConfig, run_eval
    from ares_cli.store.artifacts import ArtifactStore

    cfg = EvalConfig(grader="math_verify", grade_workers=workers, grade_timeout_s=timeout_s)
    started = time.perf_counter()
    run, results = run_eval(
        ArtifactStore(tmp / "artifacts"), model=None, cfg=cfg, data=str(problems), from_samples=str(samples),
        log=lambda _m: None,
    )  # fmt: skip
    total = time.perf_counter() - started
    manifest = json.loads((run.final_dir / "manifest.json").read_text())
    (timing,) = manifest["stats"]["timing"].values()
    overall = next(iter(results.values()))["overall"]
    return {
        "total_s": total,
        "timing": timing,
        "total_over_grade": total / timing["grade_s"],
        "vote_over_grade": timing["vote_s"] / timing["grade_s"],
        "maj": overall[f"maj@{int(overall['k'])}"],
        "timeout_rate": overall["timeout_rate"],
    }


def bench_reference(problems: list[dict], samples: list[dict], workers: int, timeout_s: float) -> dict:
    from ares_cli.grading import GradingPool

    gold = {p["id"]: p["answer"] for p in problems}
    with GradingPool("math_verify", workers=workers, timeout_s=timeout_s) as pool:
        started = time.perf_counter()
        grades = pool.grade([(gold[s["problem_id"]], s["response"]) for s in samples])
        grade_s = time.perf_counter() - started
        groups: dict[str, list] = {}
        for s, g in zip(samples, grades, strict=True):
            groups.setdefault(s["problem_id"], []).append(g.extracted)
        before = dict(pool.stats)
        started = time.perf_counter()
        pool.equivalence_classes_batch(list(groups.values()), retry_timed_out=True)
        vote_s = time.perf_counter() - started
        stats = {f"vote_{k}": pool.stats[k] - before[k] for k in ("graded", "cached", "timeouts", "killed")}
    return {"grade_s": grade_s, "vote_s": vote_s, "total_over_grade": (grade_s + vote_s) / grade_s, **stats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=250)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--pathological", type=float, default=0.05, help="fraction of samples that hang")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=1.0, help="hard per-grading timeout")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-reference", action="store_true")
    args = ap.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    problems, samples = make_case(args.problems, args.k, args.pathological, args.seed)
    out: dict = {
        "samples": len(samples),
        "pathological": sum("9^9" in s["response"] for s in samples),
        "workers": args.workers,
        "timeout_s": args.timeout_s,
        "seed": args.seed,
        "cpu_count": os.cpu_count(),
        "load_avg_1m_at_start": os.getloadavg()[0],
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, rows in (("problems.jsonl", problems), ("samples.jsonl", samples)):
            (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        out["eval_stage"] = bench_stage(
            root, root / "problems.jsonl", root / "samples.jsonl", args.workers, args.timeout_s
        )
    if not args.skip_reference:
        out["reverifying_vote"] = bench_reference(problems, samples, args.workers, args.timeout_s)
        out["vote_speedup"] = out["reverifying_vote"]["vote_s"] / max(
            out["eval_stage"]["timing"]["vote_s"], 1e-9
        )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
