"""Grading-pool start-up by multiprocessing start method: spawn against the pool's default on this
platform (``auto``: a forkserver preloading the graders' installed modules, ``ares_cli/grading/
start_method.py``), and a forkserver preloading nothing. Prints JSON.

    .venv/bin/python benchmarks/bench_grading_start.py [--workers 2] [--repeats 3] [--grader math_verify]

Start-up is the time from ``GradingPool.start()`` to the first graded sample, that is every worker started,
its modules imported, its warm-up calls made and one sample through. Each method runs in a fresh child
interpreter (a forkserver is process-wide and keeps its preload list), ``--repeats`` pools one after
another there: ``first_s`` is the first (a forkserver pays its preloads then), ``best_s`` the best; the
ratio is spawn's best over the method's, in the same run. The load average at start is printed: other
jobs on the cores stretch every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

METHODS = ("spawn", "forkserver", "auto")


def measure(method: str, grader: str, workers: int, repeats: int) -> dict:
    """In this process: seconds to a started pool's first grade under ``method``, ``repeats`` pools."""
    from ares_cli.grading import GradingPool
    from ares_cli.grading import start_method as sm

    if method == "forkserver":  # a forkserver preloading nothing, to compare with the pool's default
        sm.server_preload = lambda modules=(): []  # this child interpreter's own copy of the module
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        with GradingPool(grader, workers=workers, timeout_s=30, mp_context=method) as pool:
            (result,) = pool.grade([(str(i + 2), f"so \\boxed{{{i + 2}}}")])
            times.append(time.perf_counter() - t0)
        if result.grade != "correct":
            raise SystemExit(f"{method}: the start-up sample graded {result.grade!r}, expected 'correct'")
    preload = [] if method == "spawn" else sm.server_preload(pool.spec.preload)
    return {"start_method": pool.start_method, "preload": preload, "best_s": round(min(times), 3),
            "all_s": [round(t, 3) for t in times]}  # fmt: skip


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
