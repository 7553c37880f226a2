"""Grading-pool start-up by multiprocessing start method: spawn (the pool's default) against a forkserver
with and without the grader's modules preloaded. Prints JSON.

    .venv/bin/python benchmarks/bench_grading_start.py [--workers 2] [--repeats 3] [--grader math_verify]

Start-up is the time from ``GradingPool.start()`` to the first graded sample, that is every worker spawned,
its modules imported, its warm-up calls made and one sample through. Each method runs in a fresh child
interpreter (a forkserver is process-wide and keeps its preload list), best of ``--repeats`` starts there;
the ratio is spawn's time over the method's, in the same run. The load average at start is printed: other
jobs on the cores stretch every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

METHODS = ("spawn", "forkserver", "forkserver+preload")


def measure(method: str, grader: str, workers: int, repeats: int) -> dict:
    """In this process: best-of-``repeats`` seconds to a started pool's first grade under ``method``."""
    import multiprocessing as mp

    from ares_cli.grading import GradingPool
    from ares_cli.grading.registry import resolve_grader

    context = "spawn" if method == "spawn" else "forkserver"
    if method == "forkserver+preload":
        spec = resolve_grader(grader, None)
        mp.get_context("forkserver").set_forkserver_preload(["ares_cli.grading.worker", *spec.preload])
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        with GradingPool(grader, workers=workers, timeout_s=30, mp_context=context) as pool:
            (result,) = pool.grade([(str(i + 2), f"so \\boxed{{{i + 2}}}")])
            times.append(time.perf_counter() - t0)
        if result.grade != "correct":
            raise SystemExit(f"{method}: the start-up sample graded {result.grade!r}, expected 'correct'")
    return {"best_s": round(min(times), 3), "all_s": [round(t, 3) for t in times]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--grader", default="math_verify")
    ap.add_argument("--one", choices=METHODS, help=argparse.SUPPRESS)  # the child's measurement
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.grader, args.workers, args.repeats)))
        return
    out = {"bench": "grading_start", "grader": args.grader, "workers": args.workers, "repeats": args.repeats,
           "loadavg_start": os.getloadavg()[0], "methods": {}}  # fmt: skip
    for method in METHODS:
        cmd = [sys.executable, __file__, "--one", method, "--workers", str(args.workers),
               "--repeats", str(args.repeats), "--grader", args.grader]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out["methods"][method] = json.loads(proc.stdout.strip().splitlines()[-1])
    spawn = out["methods"]["spawn"]["best_s"]
    for row in out["methods"].values():
        row["speedup_vs_spawn"] = round(spawn / row["best_s"], 2)
        row["first_s"] = row["all_s"][0]  # a preloading forkserver pays its imports on the first start
    out["loadavg_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
