"""The math grader on real generations with independent labels (``../shared/grader-real/``). Prints JSON.

    .venv/bin/python benchmarks/bench_grader_real.py [--data DIR] [--grader math_verify] [--workers 2]

The data (third-party model outputs with their sources' own correctness labels, and cases checked by hand;
its README describes it) is read where it lies, next to the repository (``<repo>/../shared/grader-real``,
or ``--data``); when it is absent the benchmark prints a JSON note and exits 0. Nothing of it is copied:
the output holds counts only. Reported:

- per group (``source``): agreement of ``grade == correct`` with the source's label (``peer_correct``),
  and the two kinds of disagreement; the MATH + GSM8K groups together (3,000 samples);
- the confusion against the hand-checked truth (decided cases only): false accepts (graded correct, truth
  false: a reward hack) and false rejects (not graded correct, truth true), in total and per class;
- MATH-500 with each reference solution as the response: how many are graded correct (all should be);
- grading speed through the pool (samples per second, after start-up).

Every number is given for the grader (``--grader``) and for the naive reference in the same run: the raw
math-verify call (gold first, both boxed) in the same worker pool, which is what the math grader was
before its rules. Agreement is also given against the labels corrected by the hand check (the hand-checked
truth where it is decided), since the sources' graders err too. The machine's load average at start is
printed: other jobs on the cores slow both graders alike.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "grader-real"
MATH_GSM8K = ("qwen25math-math100", "tora-gsm8k", "openai-gsm8k")
FILES = ("problems.jsonl", "samples.jsonl", "peer_labels.jsonl", "handcheck.jsonl")
GOLD_FILES = ("math500_gold_problems.jsonl", "math500_gold_samples.jsonl")


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load(data: Path) -> dict:
    """Problems by id, samples, peer labels and hand checks by (problem_id, sample_idx), MATH-500 golds."""
    problems = {p["id"]: p for p in read_jsonl(data / "problems.jsonl")}
    key = lambda r: (r["problem_id"], r["sample_idx"])  # noqa: E731
    gold_problems = {p["id"]: p for p in read_jsonl(data / GOLD_FILES[0])}
    return {
        "problems": problems,
        "samples": read_jsonl(data / "samples.jsonl"),
        "peer": {key(r): r for r in read_jsonl(data / "peer_labels.jsonl")},
        "hand": {key(r): r for r in read_jsonl(data / "handcheck.jsonl")},
        "gold_items": [
            (gold_problems[s["problem_id"]]["answer"], s["response"])
            for s in read_jsonl(data / GOLD_FILES[1])
        ],
    }


RAW_MATH_VERIFY = "raw math-verify"


def reference_spec():
    """The naive reference: raw math-verify (``verify(parse(gold), parse(answer))``) in the same pool."""
    from ares_cli.grading import GraderSpec
    from ares_cli.grading.graders import math_verify_version

    return GraderSpec(
        RAW_MATH_VERIFY,
        "ares_cli.grading.graders:math_verify_grade",
        math_verify_version(),
        extract=True,
        preload=("math_verify",),
    )


def grade_all(items: list[tuple[str, str]], grader, workers: int, timeout_s: float) -> dict:
    """Grades of ``(gold, response)`` items through a GradingPool, with timing after start-up."""
    from ares_cli.grading import GradingPool

    t0 = time.perf_counter()
    with GradingPool(grader, workers=workers, timeout_s=timeout_s) as pool:
        pool.grade([("1", f"\\boxed{{{k}}}") for k in range(workers * 2)])  # wait for every worker
        startup = time.perf_counter() - t0
        t1 = time.perf_counter()
        results = pool.grade(items)
        seconds = time.perf_counter() - t1
        label, stats = pool.grader, dict(pool.stats)
    return {
        "grades": [r.grade for r in results],
        "label": label,
        "startup_s": startup,
        "seconds": seconds,
        "pool_stats": stats,
    }


def score_groups(data: dict, grades: dict[tuple[str, int], str]) -> dict:
    """Per group (the problems' ``source``): agreement with the source labels, the two disagreements,
    and agreement with the labels corrected by the hand check (``agree_handchecked``)."""
    groups: dict[str, Counter] = defaultdict(Counter)
    for key, peer in data["peer"].items():
        ours, label = grades[key] == "correct", bool(peer["peer_correct"])
        hand = data["hand"].get(key, {}).get("truth")
        c = groups[data["problems"][key[0]]["source"]]
        c["n"] += 1
        c["agree"] += ours == label
        c["agree_handchecked"] += ours == (label if hand is None else hand)
        c["we_accept_source_rejects"] += ours and not label
        c["we_reject_source_accepts"] += (not ours) and label
        c["ours_correct"] += ours
        c["source_correct"] += label
    out = {name: dict(c) | {"agreement": c["agree"] / c["n"]} for name, c in sorted(groups.items())}
    both = [out[g] for g in MATH_GSM8K if g in out]
    out["math+gsm8k"] = {k: sum(g[k] for g in both) for k in ("n", "agree", "agree_handchecked")}
    return out


def score_handcheck(data: dict, grades: dict[tuple[str, int], str]) -> dict:
    """False accepts and false rejects against the hand-checked truth, in total and per class."""
    by_class: dict[str, Counter] = defaultdict(Counter)
    total = Counter()
    for key, row in data["hand"].items():
        if row["truth"] is None:
            total["ambiguous"] += 1
            continue
        ours = grades[key] == "correct"
        c = by_class[row["class"]]
        c["n"] += 1
        c["false_accepts"] += ours and row["truth"] is False
        c["false_rejects"] += (not ours) and row["truth"] is True
        total["decided"] += 1
    total["false_accepts"] = sum(c["false_accepts"] for c in by_class.values())
    total["false_rejects"] = sum(c["false_rejects"] for c in by_class.values())
    errors = {k: dict(c) for k, c in sorted(by_class.items()) if c["false_accepts"] or c["false_rejects"]}
    return dict(total) | {"by_class": errors}


def evaluate(data: dict, keys: list, items: list, grader, args) -> dict:
    """Every number of the module docstring for one grader."""
    graded = grade_all(items + data["gold_items"], grader, args.workers, args.timeout_s)
    grades = dict(zip(keys, graded["grades"][: len(items)], strict=True))
    gold_grades = Counter(graded["grades"][len(items) :])
    n_all = len(items) + len(data["gold_items"])
    return {
        "grader": graded["label"],
        "groups": score_groups(data, grades),
        "handcheck": score_handcheck(data, grades),
        "math500_gold": {"n": len(data["gold_items"]), "correct": gold_grades["correct"]}
        | {k: v for k, v in gold_grades.items() if k != "correct"},
        "grades": dict(Counter(graded["grades"])),
        "speed": {
            "samples": n_all,
            "seconds": graded["seconds"],
            "samples_per_s": n_all / graded["seconds"],
            "startup_s": graded["startup_s"],
        },
        "pool_stats": graded["pool_stats"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the grader-real folder")
    ap.add_argument("--grader", default="math_verify")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=10.0)
    args = ap.parse_args()
    missing = [f for f in FILES + GOLD_FILES if not (args.data / f).is_file()]
    if missing:
        print(json.dumps({"benchmark": "grader_real", "skipped": f"data not found in {args.data}",
                          "missing": missing}))  # fmt: skip
        return
    data = load(args.data)
    keys = [(s["problem_id"], s["sample_idx"]) for s in data["samples"]]
    items = [(data["problems"][s["problem_id"]]["answer"], s["response"]) for s in data["samples"]]
    grader = evaluate(data, keys, items, args.grader, args)
    reference = evaluate(data, keys, items, reference_spec(), args)
    out = {
        "benchmark": "grader_real",
        "data": str(args.data),
        "workers": args.workers,
        "cpu_count": os.cpu_count(),
        "load_avg_1m_at_start": os.getloadavg()[0],
        "grader": grader,
        "reference": reference,
        "speed_over_reference": grader["speed"]["samples_per_s"] / reference["speed"]["samples_per_s"],
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
