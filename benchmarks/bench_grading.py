"""Grading throughput: GradingPool (killable workers) versus serial in-process math-verify. Prints JSON.

    .venv/bin/python benchmarks/bench_grading.py [--workers 2] [--n-toy 400] [--n-math 300]

Items are unique (gold, response) pairs so the pool's cache and de-duplication do not flatter it.
Timings are best-of-``--repeats``; the load average at start is printed because a busy machine (other
jobs on the same cores) caps the pool's parallel speed-up.
Pool start-up (spawning workers, importing sympy) is reported apart from steady-state throughput.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time

from ares_cli.grading import GradeCache, GradingPool, extract_boxed
from ares_cli.grading.graders import math_verify_grade


def toy_items(n: int, rng: random.Random) -> list[tuple[str, str]]:
    """Integer answers as the toy world writes them; ~70% correct."""
    items = []
    for i in range(n):
        gold = rng.randint(-999, 9999) * 10_000 + i  # unique
        pred = gold if rng.random() < 0.7 else gold + rng.randint(1, 9)
        items.append((str(gold), f"Step 1: ... so the result is \\boxed{{{pred}}}."))
    return items


def _math_pair(rng: random.Random, i: int) -> tuple[str, str]:
    a, b = rng.randint(1, 97), rng.randint(2, 89) + i % 7
    kind = i % 6
    if kind == 0:
        return f"\\frac{{{a}}}{{{b}}}", rng.choice(
            [f"{a}/{b}", f"\\dfrac{{{a}}}{{{b}}}", f"\\frac{{{a + 1}}}{{{b}}}"]
        )
    if kind == 1:
        return f"{a}\\sqrt{{{b}}}", rng.choice(
            [f"{a}\\sqrt{{{b}}}", f"\\sqrt{{{a * a * b}}}", f"{a}\\sqrt{{{b + 1}}}"]
        )
    if kind == 2:
        return f"[{a}, {a + b})", rng.choice([f"[{a},{a + b})", f"({a}, {a + b})", f"[{a}, {a + b})"])
    if kind == 3:
        return f"{a}.{b}", rng.choice([f"{a}.{b}", f"\\frac{{{a * 100 + b}}}{{100}}", f"{a}.{b + 1}"])
    if kind == 4:
        return f"{a}\\pi", rng.choice([f"{a}\\pi", f"\\pi \\cdot {a}", f"{a + 1}\\pi"])
    return f"x^2+{a}x+{b}", rng.choice([f"{b}+{a}x+x^2", f"x^2+{a}x+{b + 1}", f"x(x+{a})+{b}"])


def math_items(n: int, rng: random.Random) -> list[tuple[str, str]]:
    """MATH-style answers: fractions, radicals, intervals, decimals, multiples of pi, polynomials."""
    seen: dict[tuple[str, str], None] = {}
    i = 0
    while len(seen) < n:
        gold, pred = _math_pair(rng, i)
        seen.setdefault((gold, f"Therefore the answer is $\\boxed{{{pred}}}$."), None)
        i += 1
    return list(seen)


def _proc_cpu_s(pids: list[int]) -> float | None:
    """User+system CPU seconds of live processes from /proc (Linux); None where unavailable."""
    try:
        total = 0
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def bench_serial(items: list[tuple[str, str]], repeats: int) -> dict:
    math_verify_grade("1", "1")  # warm imports
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        grades = []
        for gold, response in items:
            ans = extract_boxed(response)
            grades.append("invalid" if ans is None else math_verify_grade(gold, ans))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    dt = min(times)
    return {
        "seconds": dt,
        "gradings_per_s": len(items) / dt,
        "cpu_ms_per_grading": 1000 * min(cpu) / len(items),
        "correct": grades.count("correct"),
    }


def bench_pool(
    items: list[tuple[str, str]], grader: str, workers: int, timeout_s: float, repeats: int
) -> dict:
    t0 = time.perf_counter()
    with GradingPool(grader, workers=workers, timeout_s=timeout_s) as pool:
        pool.grade([("1", f"\\boxed{{{k}}}") for k in range(workers * 2)])  # wait for every worker
        startup = time.perf_counter() - t0
        times, cpu = [], []
        for _ in range(repeats):
            pool.cache = GradeCache()  # every repeat verifies every item again
            pids = pool.worker_pids()
            t1, c1, w1 = time.perf_counter(), time.process_time(), _proc_cpu_s(pids)
            res = pool.grade(items)
            times.append(time.perf_counter() - t1)
            w2 = _proc_cpu_s(pids)
            if w1 is not None and w2 is not None:
                cpu.append(time.process_time() - c1 + w2 - w1)
        stats = dict(pool.stats)
    grades = [r.grade for r in res]
    dt = min(times)
    return {
        "seconds": dt,
        "gradings_per_s": len(items) / dt,
        "cpu_ms_per_grading": 1000 * min(cpu) / len(items) if cpu else None,
        "startup_s": startup,
        "correct": grades.count("correct"),
        "timeouts": grades.count("timeout"),
        "errors": grades.count("error"),
        "pool_stats": stats,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--n-toy", type=int, default=400)
    ap.add_argument("--n-math", type=int, default=300)
    ap.add_argument("--timeout-s", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2, help="best-of-N timing (shared machines are noisy)")
    args = ap.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout disabled" notice (serial path)
    rng = random.Random(args.seed)
    sets = {"toy_int": toy_items(args.n_toy, rng), "math_style": math_items(args.n_math, rng)}
    out: dict = {
        "workers": args.workers,
        "cpu_count": os.cpu_count(),
        "load_avg_1m_at_start": os.getloadavg()[0],
        "repeats": args.repeats,
        "results": {},
    }
    for name, items in sets.items():
        serial = bench_serial(items, args.repeats)
        pool = bench_pool(items, "math_verify", args.workers, args.timeout_s, args.repeats)
        row = {
            "n": len(items),
            "serial_math_verify": serial,
            "pool_math_verify": pool,
            "pool_over_serial": pool["gradings_per_s"] / serial["gradings_per_s"],
            "same_correct_count": serial["correct"] == pool["correct"],
        }
        if name == "toy_int":
            fast = bench_pool(items, "boxed_int", args.workers, args.timeout_s, args.repeats)
            row["pool_boxed_int"] = fast
            row["pool_boxed_int_over_serial"] = fast["gradings_per_s"] / serial["gradings_per_s"]
        out["results"][name] = row
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
