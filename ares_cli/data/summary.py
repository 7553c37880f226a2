"""Summaries of validated problem records (pure functions; no I/O)."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ares_cli.data.loader import load_problems

_ANSWER_TYPES = (
    ("integer", re.compile(r"^[+-]?\d+$")),
    ("decimal", re.compile(r"^[+-]?(\d+\.\d*|\.\d+)$")),
    ("fraction", re.compile(r"^[+-]?\d+\s*/\s*\d+$")),
    ("latex", re.compile(r"\\")),
)


def answer_type(answer: str) -> str:
    """Coarse kind of a gold answer: integer, decimal, fraction, latex or text."""
    text = (
        answer.strip().replace(",", "") if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+", answer.strip()) else answer
    )
    for name, pattern in _ANSWER_TYPES:
        if pattern.search(text.strip()):
            return name
    return "text"


def length_stats(values: Sequence[int]) -> dict[str, float]:
    """min / mean / median / max of a list of lengths (zeros when empty)."""
    if not values:
        return {"min": 0, "mean": 0.0, "median": 0.0, "max": 0}
    return {
        "min": min(values),
        "mean": round(statistics.fmean(values), 2),
        "median": float(statistics.median(values)),
        "max": max(values),
    }


def difficulty_histogram(records: Sequence[dict]) -> dict[str, int]:
    """Counts of ``meta.difficulty`` values (numeric order when all are numbers; 'none' for missing)."""
    values = [r.get("meta", {}).get("difficulty") for r in records]
    if all(v is None for v in values):
        return {}
    counts = Counter(values)

    def key(item: tuple[Any, int]):
        v = item[0]
        is_num = isinstance(v, (int, float)) and not isinstance(v, bool)
        return (v is None, not is_num, v if is_num else 0, str(v))

    return {("none" if v is None else str(v)): n for v, n in sorted(counts.items(), key=key)}


def summarize(records: Sequence[dict]) -> dict[str, Any]:
    """Rows, sources, answer types, difficulty histogram, problem/answer length stats, image counts."""
    return {
        "rows": len(records),
        "sources": dict(Counter(r["source"] for r in records).most_common()),
        "answer_types": dict(Counter(answer_type(r["answer"]) for r in records).most_common()),
        "difficulty": difficulty_histogram(records),
        "problem_chars": length_stats([len(r["problem"]) for r in records]),
        "answer_chars": length_stats([len(r["answer"]) for r in records]),
        "with_images": sum(1 for r in records if r.get("images")),
        "meta_keys": sorted({k for r in records for k in r.get("meta", {})}),
    }


def check_source(
    source: str,
    *,
    field_map: str | dict | None = None,
    limit: int | None = None,
    grader: str | None = None,
    self_grade: bool = True,
    trust_grader_code: bool = False,
) -> dict:
    """Load and validate ``source``, decoding every image (raises InputErrors naming every bad row, file and
    field), and summarise it, with warnings about golds the grader cannot read
    (:mod:`ares_cli.data.gold_check`; ``grader``: the manifest's, else math_verify)."""
    from ares_cli.data.gold_check import gold_warnings
    from ares_cli.data.images import inspect_images
    from ares_cli.data.records import raise_errors
    from ares_cli.grading.declared import grader_for

    loaded = load_problems(source, limit=limit, field_map=field_map)
    image_summary, errors = inspect_images(loaded.records, loaded.locations)
    raise_errors(errors)
    grader = grader_for(grader, loaded.manifest)
    warnings = gold_warnings(
        loaded.records, loaded.locations, grader=grader, self_grade=self_grade, trust_code=trust_grader_code
    )
    return {
        "source": str(source),
        "valid": True,
        **summarize(loaded.records),
        "image_stats": image_summary,
        "provenance": loaded.provenance,
        "gold_check": {"grader": grader, "self_graded": self_grade, "warnings": warnings},
    }
