"""Quick health check of a toy checkpoint: accuracy by difficulty, ARES pass-rate buckets, length variety.

Uses a simple boxed-integer check (the last ``\\boxed{...}`` equals the gold integer), not the full grader.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from ares_cli.errors import UsageError
from ares_cli.toy.tasks import load_split
from ares_cli.toy.teacher import last_boxed_int

EASY_MIN_PASS_RATE = 0.75
HARD_MAX_PASS_RATE = 0.25


def pass_rate_bucket(pass_rate: float) -> str:
    """ARES bucket of a pass rate: easy (>= 6/8), hard (<= 2/8) or medium."""
    if pass_rate >= EASY_MIN_PASS_RATE:
        return "easy"
    if pass_rate <= HARD_MAX_PASS_RATE:
        return "hard"
    return "medium"


def length_cv(lengths: list[int]) -> float:
    """Coefficient of variation (population std / mean) of response lengths."""
    mean = statistics.fmean(lengths)
    return statistics.pstdev(lengths) / mean if mean > 0 else 0.0


def summarize(records: list[dict], completions: list[list], k: int) -> dict:
    """Accuracy by difficulty, bucket fractions and mean within-problem length CV of scored completions."""
    correct_by_difficulty: dict[int, list[float]] = defaultdict(list)
    buckets = {"easy": 0, "medium": 0, "hard": 0}
    cvs, lengths = [], []
    for record, samples in zip(records, completions, strict=True):
        gold = int(record["answer"])
        hits = [last_boxed_int(c.text) == gold for c in samples]
        pass_rate = sum(hits) / len(hits)
        correct_by_difficulty[record["meta"]["difficulty"]].append(pass_rate)
        buckets[pass_rate_bucket(pass_rate)] += 1
        counts = [len(c.token_ids) for c in samples]
        lengths.extend(counts)
        if k > 1:
            cvs.append(length_cv(counts))
    total = len(records)
    return {
        "n_problems": total,
        "k": k,
        "accuracy": statistics.fmean(p for rates in correct_by_difficulty.values() for p in rates),
        "accuracy_by_difficulty": {
            d: round(statistics.fmean(rates), 4) for d, rates in sorted(correct_by_difficulty.items())
        },
        "bucket_fractions": {name: round(count / total, 4) for name, count in buckets.items()},
        "mean_length_cv": round(statistics.fmean(cvs), 4) if cvs else None,
        "mean_response_tokens": round(statistics.fmean(lengths), 1),
    }


def measure_base(
    model_dir: str | Path,
    split: str = "test",
    k: int = 1,
    temperature: float = 0.0,
    max_new_tokens: int = 512,
    *,
    limit: int | None = None,
    seed: int = 0,
    batch_size: int = 128,
) -> dict:
    """Sample ``k`` responses per problem of a toy ``split`` from ``model_dir`` and summarise them.

    ``limit`` keeps the first ``limit`` problems (splits cycle through difficulties, so any prefix is
    balanced). Returns the dict of :func:`summarize`.
    """
    from ares_cli.generation import GenerationRequest, SamplingParams, get_backend, render_prompt, seed_for

    if k < 1:
        raise UsageError(f"k must be >= 1, got {k}")
    records = load_split(split)[:limit] if limit else load_split(split)
    backend = get_backend("hf", model_dir, batch_size=batch_size)
    requests = [
        GenerationRequest(
            prompt=render_prompt(backend.tokenizer, record["problem"]),
            seeds=tuple(seed_for(seed, record["id"], i) for i in range(k)),
            key=record["id"],
        )
        for record in records
    ]
    sampling = SamplingParams(temperature=temperature, top_p=1.0, max_new_tokens=max_new_tokens)
    return summarize(records, backend.generate(requests, sampling), k)
