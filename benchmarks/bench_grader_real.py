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
- grading speed through the pool (samples per second, after start-up);
- ``math+judge`` with a scripted judge that answers EQUIVALENT to everything it is asked: which samples
  the rules hand to the judge (per group, and every hand-checked case the rules do not accept), so the
  judge path is exercised on each of them; with ``--judge-model`` also the seconds per verdict of a real
  judge model through the hf backend on the first ``--judge-limit`` of those questions;
- the repository's hand-labelled adversarial set (``tests/data/grader_adversarial.jsonl``), each case
  graded by its own grader reference (a manifest's grading options included) and by raw math-verify:
  false accepts and false rejects per class (where the code under test cannot resolve a grader reference,
  code from before grading options, the case is graded by the reference's name without options, else by
  ``math``, what the manifests named then; their number is printed);
- DAPO-style responses (a final ``Answer:`` line): how many of the real generations end in one, and how
  many grades change between ``math`` and DAPO-Math-17k's declared ``math[answer_forms=answer_line+boxed]``,
  on the real generations and on the adversarial set's answer-line cases.

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
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grader_real_judge import judge_cost, judge_routing  # noqa: E402

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


ADVERSARIAL = ROOT / "tests" / "data" / "grader_adversarial.jsonl"
DAPO_GRADER = "math[answer_forms=answer_line+boxed]"


def _problem(case: dict) -> dict:
    meta = {"options": case["options"]} if "options" in case else {}
    return {"id": case["id"], "problem": "?", "answer": case["gold"], "meta": meta}


def _pool(grader, workers: int, timeout_s: float):
    """A pool for ``grader``, else (code that cannot resolve it: before grading options) for its name
    without options, else ``math`` (what the manifests named before); and the grader it holds."""
    from ares_cli.errors import UsageError
    from ares_cli.grading import GradingPool

    names = (
        [grader]
        if not isinstance(grader, str)
        else list(dict.fromkeys([grader, grader.split("[")[0], "math"]))
    )
    for name in names:
        try:
            return GradingPool(name, workers=workers, timeout_s=timeout_s), name
        except UsageError:
            continue
    raise UsageError(f"no grader of {names} resolves")


def _grade_cases(cases: list[dict], grader, workers: int, timeout_s: float) -> tuple[list[str], bool]:
    """Grades of adversarial cases by one grader, and whether it had to fall back (:func:`_pool`)."""
    pool, used = _pool(grader, workers, timeout_s)
    with pool:
        grades = [r.grade for r in pool.grade([(pool.gold_for(_problem(c)), c["response"]) for c in cases])]
    return grades, used != grader


def _confusion(cases: list[dict], grades: list[str]) -> dict:
    by_class: dict[str, Counter] = defaultdict(Counter)
    for case, grade in zip(cases, grades, strict=True):
        c = by_class[case["class"]]
        c["n"] += 1
        ok = grade == "correct"
        c["false_accepts"] += ok and not case["label"]
        c["false_rejects"] += (not ok) and case["label"] and case.get("expect") != "judge"
        c["left_to_judge"] += (not ok) and case.get("expect") == "judge"
    total = Counter()
    for c in by_class.values():
        total.update(c)
    return dict(total) | {"by_class": {k: dict(c) for k, c in sorted(by_class.items())}}


def adversarial(args) -> dict | None:
    """The adversarial set by class: each case's own grader, and raw math-verify on every case."""
    if not ADVERSARIAL.is_file():
        return None
    cases = [
        json.loads(line) for line in ADVERSARIAL.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    grades: list[str] = [""] * len(cases)
    fell_back = 0
    for grader in dict.fromkeys(c["grader"] for c in cases):
        index = [i for i, c in enumerate(cases) if c["grader"] == grader]
        found, fallback = _grade_cases([cases[i] for i in index], grader, args.workers, args.timeout_s)
        fell_back += len(index) if fallback else 0
        for i, g in zip(index, found, strict=True):
            grades[i] = g
    reference, _ = _grade_cases(cases, reference_spec(), args.workers, args.timeout_s)
    dapo = [
        i for i, c in enumerate(cases) if c["class"] == "answer line (DAPO)" and c["grader"] == DAPO_GRADER
    ]
    plain, _ = _grade_cases([cases[i] for i in dapo], "math", args.workers, args.timeout_s)
    changed = sum(a != b for a, b in zip(plain, [grades[i] for i in dapo], strict=True))
    return {
        "cases": len(cases),
        "graded_by_a_fallback_grader": fell_back,
        "grader": _confusion(cases, grades),
        "raw math-verify": _confusion(cases, reference),
        "dapo_answer_line_cases": {"n": len(dapo), "grade_changed_vs_math": changed},
    }


def dapo_style(data: dict, args) -> dict:
    """Real generations ending in an ``Answer:`` line, and their grades by ``math`` and by DAPO's forms."""
    import re

    final_line = re.compile(r"^\s*(?:[*_#>]+\s*)?(?:final\s+)?answer\s*[*_]*\s*[:：]", re.I)
    chosen = []
    for s in data["samples"]:
        lines = [line for line in s["response"].splitlines() if line.strip()]
        if lines and final_line.match(lines[-1]):
            chosen.append((data["problems"][s["problem_id"]]["answer"], s["response"]))
    out = {"samples": len(data["samples"]), "ending_in_an_answer_line": len(chosen)}
    if chosen:
        from ares_cli.errors import UsageError

        before = grade_all(chosen, "math", args.workers, args.timeout_s)["grades"]
        try:
            after = grade_all(chosen, DAPO_GRADER, args.workers, args.timeout_s)["grades"]
        except UsageError:
            return out | {"dapo_grader": "unsupported"}
        out["grade_changed"] = sum(a != b for a, b in zip(before, after, strict=True))
        out["became_correct"] = sum(b == "correct" != a for a, b in zip(before, after, strict=True))
    return out


def speed_reps(items: list[tuple[str, str]], grader, args) -> dict | None:
    """``--speed-reps`` more timings of the grader and the reference on ``items``, alternated (grader first
    in even reps, the reference first in odd ones), each in a fresh pool: the ratio per rep and its median."""
    if args.speed_reps < 1:
        return None
    ratios = []
    for rep in range(args.speed_reps):
        order = [grader, reference_spec()] if rep % 2 == 0 else [reference_spec(), grader]
        seconds = [grade_all(items, g, args.workers, args.timeout_s)["seconds"] for g in order]
        ours, theirs = seconds if rep % 2 == 0 else seconds[::-1]
        ratios.append(theirs / ours)  # > 1: the grader is faster
    import statistics

    return {
        "reps": args.speed_reps,
        "grader_speed_over_reference": ratios,
        "median": statistics.median(ratios),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the grader-real folder")
    ap.add_argument("--grader", default="math_verify")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=10.0)
    ap.add_argument("--judge-model", default=None, help="time a real judge (hf) on the routed questions")
    ap.add_argument("--judge-limit", type=int, default=20)
    ap.add_argument(
        "--speed-reps", type=int, default=0, help="extra timing reps, grader and reference alternated"
    )
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
        "speed_reps": speed_reps(items + data["gold_items"], args.grader, args),
    }
    routing = judge_routing(data, keys, items, args)
    questions = routing.pop("questions")
    if args.judge_model:
        routing["cost"] = judge_cost(questions, args.judge_model, args.judge_limit)
    out["math+judge (scripted judge)"] = routing
    out["adversarial"] = adversarial(args)
    out["dapo_style"] = dapo_style(data, args)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
