"""RL steps grading each decode batch while the next decodes (``grading.overlap=true``, the default)
against grading all responses after generation; prints JSON.

The toy base, ``--prompts`` x ``--group`` responses of <= ``--max-new-tokens`` per step, the
``math_verify`` grader in ``--workers`` worker processes, one torch thread (the decode stands in for a
GPU: the grading workers get the other cores), ``--batch-sizes`` rows per decode batch (one batch per
step is the default shape: then there is nothing to overlap). The toy's short answers grade in about a
millisecond; ``--grade-delay-ms D`` adds D ms per sample before math-verify (this module's
``delayed_math_grade``, a stand-in for the cost of real, long responses: docs/evaluation.md measures
43-91 samples/s on 2 workers, ~22-45 ms per sample per worker). Each rep runs both settings, alternated,
one warm-up step then ``--steps`` timed ones; the report is the median over reps of the mean step,
generation and exposed grading time (the wait for grades after the last batch decodes), the ratio
overlap / after, and whether the two runs' metrics (times aside) are identical.

    .venv/bin/python benchmarks/bench_grading_overlap.py [--reps 3] [--batch-sizes 16,64]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

DELAY_ENV = "ARES_BENCH_GRADE_DELAY_MS"


def delayed_math_grade(gold: str, response: str) -> str:
    """The ``math_verify`` grade of the response's boxed answer, after ``$ARES_BENCH_GRADE_DELAY_MS`` ms."""
    from ares_cli.grading.extract import extract_boxed
    from ares_cli.grading.graders import INVALID
    from ares_cli.grading.math_grader import math_grade

    time.sleep(float(os.environ.get(DELAY_ENV, "0")) / 1000)
    answer = extract_boxed(response)
    return INVALID if answer is None else math_grade(gold, answer)


def run(args, batch_size: int, overlap: bool, out: Path) -> tuple[dict, list[dict]]:
    from ares_cli.data.loader import load_problems
    from ares_cli.toy import base_dir
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.trainer import train_rl

    sets = [f"steps={args.steps + 1}", f"rollout.prompts_per_step={args.prompts}", f"rollout.group_size={args.group}",
            f"rollout.max_new_tokens={args.max_new_tokens}", f"rollout.batch_size={batch_size}",
            f"optim.mini_batch_size={args.prompts}", "kl.coef=0", "val.every=0", "save_every=0", "filter.mode=off",
            f"grading.workers={args.workers}", f"grading.overlap={str(overlap).lower()}",
            *(["grading.grader=math_verify"] if not args.grade_delay_ms else
              ["grading.grader=bench_grading_overlap:delayed_math_grade", "grading.trust_grader_code=true"])]  # fmt: skip
    problems = load_problems("toy-train", limit=args.prompts * (args.steps + 1)).records
    train_rl(resolve_rl_config(sets=sets), model_path=Path(base_dir()), problems=problems, val_problems=None,
             out_dir=out, log=lambda _m: None)  # fmt: skip
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    timed = rows[1:]  # warm-up out
    mean = lambda key: sum(r[key] for r in timed) / len(timed)  # noqa: E731
    same = [{k: v for k, v in r.items() if not k.startswith("time/") and k != "tokens_per_s"} for r in rows]
    return {"step": mean("time/step"), "generate": mean("time/generate"), "grade": mean("time/grade")}, same


def measure() -> dict:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per run (after one warm-up)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch-sizes", default="16,64", help="rows per decode batch, comma-separated")
    parser.add_argument("--grade-delay-ms", type=float, default=0.0, help="extra grading cost per sample")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ[DELAY_ENV] = str(args.grade_delay_ms)  # read by the grading workers
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # workers import this module's grader
    result = {"prompts": args.prompts, "group": args.group, "max_new_tokens": args.max_new_tokens,
              "grading_workers": args.workers, "grade_delay_ms": args.grade_delay_ms, "reps": args.reps, "steps_timed": args.steps, "torch_threads": 1,
              "by_batch_size": {}}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            reps, metrics = {"overlap": [], "after": []}, {}
            for rep in range(args.reps):
                for name in ("overlap", "after") if rep % 2 == 0 else ("after", "overlap"):
                    timing, metrics[name] = run(
                        args, batch_size, name == "overlap", Path(tmp) / f"{batch_size}-{rep}-{name}"
                    )
                    reps[name].append(timing)
            med = {
                s: {k: statistics.median(r[k] for r in reps[s]) for k in ("step", "generate", "grade")}
                for s in reps
            }
            result["by_batch_size"][str(batch_size)] = {
                "decode_batches_per_step": -(-args.prompts * args.group // batch_size),
                "median_s": {s: {k: round(v, 3) for k, v in m.items()} for s, m in med.items()},
                "ratio_overlap_to_after": {k: round(med["overlap"][k] / med["after"][k], 3) for k in ("step", "generate")},
                "grade_share_after": round(med["after"]["grade"] / med["after"]["step"], 3),
                "grade_share_overlap": round(med["overlap"]["grade"] / med["overlap"]["step"], 3),
                "metrics_identical": metrics["overlap"] == metrics["after"],
                "step_ratio_per_rep": [round(a["step"] / b["step"], 3) for a, b in zip(reps["overlap"], reps["after"], strict=True)],
            }  # fmt: skip
    return result


def main() -> None:
    # DeepSpeed logs to stdout when it is imported: stdout carries the JSON alone
    with contextlib.redirect_stdout(sys.stderr):
        result = measure()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
