"""The judge half of ``bench_grader_real.py``: what ``math+judge`` routes to a judge on the real
generations (with a scripted judge, so the routing is measured without a model), and a real judge
model's seconds per verdict."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path


class ScriptedJudge:
    """A generation backend that answers every judge prompt with an EQUIVALENT verdict line (the judge
    path, not a judge)."""

    name = "scripted"

    def generate(self, requests, sampling):
        from ares_cli.generation import Completion

        return [[Completion("VERDICT: EQUIVALENT", [], "stop")] for _ in requests]


def judge_routing(data: dict, keys: list, items: list, args) -> dict:
    """``math+judge`` with :class:`ScriptedJudge`: what the rules hand over, per group and hand-checked."""
    from ares_cli.grading.judge import subject_of
    from ares_cli.grading.judge_grading import JudgedGrading
    from ares_cli.stages.judge_model import JudgeConfig, ModelJudge

    judge = ModelJudge(ScriptedJudge, "scripted", JudgeConfig())
    t0 = time.perf_counter()
    with JudgedGrading("math+judge", judge, workers=args.workers, timeout_s=args.timeout_s) as grading:
        results = grading.grade(items)
    seconds = time.perf_counter() - t0
    judged = {k: r.grader.startswith("judge==") for k, r in zip(keys, results, strict=True)}
    subjects = [
        (item[0], subject_of(item[1], r.extracted))
        for key, item, r in zip(keys, items, results, strict=True)
        if judged[key]
    ]
    groups: Counter = Counter(data["problems"][k[0]]["source"] for k, asked in judged.items() if asked)
    hand = Counter()
    for key, row in data["hand"].items():
        if row["truth"] is None:
            continue
        if judged[key]:
            hand[f"routed_truth_{str(row['truth']).lower()}"] += 1
        elif row["truth"] is True and results[keys.index(key)].grade != "correct":
            hand["rule_false_rejects_not_routed"] += 1
        elif row["truth"] is False and results[keys.index(key)].grade == "correct":
            hand["rule_false_accepts"] += 1
    return {
        "samples_routed": sum(judged.values()),
        "routed_by_group": dict(sorted(groups.items())),
        "judge_questions": judge.stats["asked"],
        "handcheck": dict(hand),
        "seconds": seconds,
        "questions": subjects,
    }


def judge_cost(questions: list[tuple[str, str]], model: str, limit: int) -> dict:
    """Seconds per verdict of a real judge model (hf backend, greedy) on the first ``limit`` questions."""
    from ares_cli.generation import get_backend
    from ares_cli.stages.judge_model import JudgeConfig, ModelJudge

    cfg = JudgeConfig(model=model, backend="hf")
    judge = ModelJudge(lambda: get_backend("hf", model, batch_size=cfg.batch_size), Path(model).name, cfg)
    pairs = list(dict.fromkeys(questions))[:limit]
    judge.decide(pairs[:1])  # loading the model is not timed
    t0 = time.perf_counter()
    judge.decide(pairs[1:])
    n = max(1, len(pairs) - 1)
    return {"model": model, "questions": n, "seconds_per_verdict": (time.perf_counter() - t0) / n}
