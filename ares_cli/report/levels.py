"""The order of difficulty levels in tables and figures: numbers, then known names, then the rest.

Difficulties come as numbers (MATH levels, the toy world's steps) or as names (MMMU's and DynaMath's
``Easy`` / ``Medium`` / ``Hard``, passrate buckets). Numbers sort numerically, the known names by
difficulty (case-insensitive), and any other category keeps its first-seen position, so no category ever
stops a report. A level has a rank (for correlations) only when every level is a number or a known name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

KNOWN = ("very easy", "easy", "medium", "hard", "very hard")

__all__ = ["KNOWN", "level_order", "level_ranks"]


def _number(level: object) -> float | None:
    if isinstance(level, bool):
        return None
    try:
        value = float(level)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def level_order(levels: Iterable[object]) -> list[str]:
    """Distinct levels as strings: numbers ascending, then :data:`KNOWN` names, then the rest as first seen."""
    seen = list(dict.fromkeys(str(level) for level in levels))
    numbers = sorted((s for s in seen if _number(s) is not None), key=lambda s: _number(s))
    known = sorted(
        (s for s in seen if s.strip().lower() in KNOWN), key=lambda s: KNOWN.index(s.strip().lower())
    )
    others = [s for s in seen if s not in numbers and s not in known]
    return numbers + known + others


def level_ranks(levels: Iterable[object]) -> dict[str, float] | None:
    """Each level's numeric position (its value for numbers; easy < medium < hard after every number), or
    None when some level is a category without an order (then no rank correlation is defined)."""
    order = level_order(levels)
    if any(_number(s) is None and s.strip().lower() not in KNOWN for s in order):
        return None
    top = max((_number(s) for s in order if _number(s) is not None), default=0.0)
    return {
        s: _number(s) if _number(s) is not None else top + 1 + KNOWN.index(s.strip().lower()) for s in order
    }
