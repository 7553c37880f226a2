"""Summaries of validated problem records (pure functions apart from :func:`check_source`'s loading)."""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
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


_LETTER = r"\(?[A-Z]\)?"
_CHOICE = re.compile(rf"^{_LETTER}$")
_MULTI_CHOICE = re.compile(rf"^{_LETTER}(\s*(,|;|and)\s*{_LETTER})+$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(\s*/\s*\d+)?$")
ANSWER_FORMS = ("integer", "decimal", "fraction", "latex", "choice", "multi-choice", "list", "text")


def answer_form(record: dict) -> str:
    """The form a gold is written in, as a grader meets it: ``choice`` (one option letter, or the text of
    one of ``meta.options``), ``multi-choice`` (``A, C``), ``list`` (a bracketed list, as MMMU's
    alternatives ``['24/7', '3.429']``, or comma-separated numbers), else :func:`answer_type`."""
    answer = str(record["answer"]).strip()
    options = (record.get("meta") or {}).get("options")
    if _CHOICE.match(answer) or (isinstance(options, list) and answer in options):
        return "choice"
    if _MULTI_CHOICE.match(answer):
        return "multi-choice"
    if answer.startswith("[") and answer.endswith("]"):
        return "list"
    parts = [p.strip() for p in answer.split(",")]
    if len(parts) > 1 and all(_NUMBER.match(p) for p in parts) and answer_type(answer) != "integer":
        return "list"
    return answer_type(answer)


def quantiles(values: Sequence[int]) -> dict[str, float]:
    """min, p50, p90, p99, max and mean of ``values`` (nearest-rank quantiles; zeros when empty)."""
    if not values:
        return {"min": 0, "p50": 0, "p90": 0, "p99": 0, "max": 0, "mean": 0.0}
    ordered = sorted(values)

    def rank(q: float):
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"min": ordered[0], "p50": rank(0.5), "p90": rank(0.9), "p99": rank(0.99), "max": ordered[-1],
            "mean": round(statistics.fmean(ordered), 1)}  # fmt: skip


def repeated_prompts(records: Sequence[dict]) -> int:
    """Records whose prompt (text and images) an earlier record has: what ``dedup: prompt`` would drop."""
    seen: set[tuple] = set()
    repeats = 0
    for r in records:
        key = (r["problem"], *(r.get("images") or ()))
        repeats += key in seen
        seen.add(key)
    return repeats


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
        "answer_forms": dict(Counter(answer_form(r) for r in records).most_common()),
        "difficulty": difficulty_histogram(records),
        "problem_chars": length_stats([len(r["problem"]) for r in records]),
        "problem_chars_quantiles": quantiles([len(r["problem"]) for r in records]),
        "repeated_prompts": repeated_prompts(records),
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
    count_tokens: tuple[str, Callable[[list[dict]], list[int]]] | None = None,
    skip_invalid_rows: bool = False,
) -> dict:
    """Load and validate ``source``, decoding every image (raises InputErrors naming every bad row, file and
    field), and summarise it, with warnings about golds the grader cannot read
    (:mod:`ares_cli.data.gold_check`; ``grader``: the manifest's, else math_verify). ``count_tokens``:
    ``(model, count)``, prompt-token quantiles from ``count(records)`` (each record's prompt tokens)."""
    from ares_cli.data.gold_check import gold_warnings
    from ares_cli.data.images import inspect_images
    from ares_cli.data.records import raise_errors
    from ares_cli.grading.declared import grader_for

    loaded = load_problems(source, limit=limit, field_map=field_map, skip_invalid_rows=skip_invalid_rows)
    image_summary, errors = inspect_images(loaded.records, loaded.locations)
    raise_errors(errors)
    grader = grader_for(grader, loaded.manifest)
    warnings = gold_warnings(
        loaded.records, loaded.locations, grader=grader, self_grade=self_grade, trust_code=trust_grader_code
    )
    tokens = None
    if count_tokens is not None:
        model, count = count_tokens
        tokens = {"model": model, **quantiles(count(loaded.records))}
    report = loaded.provenance.get("rows_report") or {}
    return {
        "source": str(source),
        "valid": True,
        **summarize(loaded.records),
        "prompt_tokens": tokens,
        "source_rows": report.get("source_rows"),
        "duplicates": report.get("duplicates"),
        "excluded": report.get("excluded", []),
        "skipped_invalid": report.get("skipped_invalid", {"count": 0, "rows": []}),
        "image_stats": image_summary,
        "provenance": loaded.provenance,
        "gold_check": {"grader": grader, "self_graded": self_grade, "warnings": warnings},
    }
