"""tests/coverage_tiers.py: what the fast tier misses, read from two coverage json reports."""

from __future__ import annotations

from coverage_tiers import _ranges, compare


def _report(files: dict[str, list[int]], statements: int, missed: int) -> dict:
    totals = {
        "num_statements": statements,
        "missing_lines": missed,
        "percent_covered": 100 * (1 - missed / statements),
    }
    return {"files": {f: {"executed_lines": lines} for f, lines in files.items()}, "totals": totals}


def test_lines_only_the_slow_tier_reaches_are_named_per_file():
    fast = _report({"a.py": [1, 2, 3]}, 10, 7)
    every = _report({"a.py": [1, 2, 3, 4, 5, 9], "b.py": [1]}, 10, 3)
    result = compare(fast, every)
    assert result["only_slow"] == {"a.py": [4, 5, 9], "b.py": [1]}
    assert abs(result["fast"]["percent"] - 30.0) < 1e-9 and result["all"]["missed"] == 3


def test_a_file_the_fast_tier_covers_entirely_is_not_listed():
    fast = _report({"a.py": [1, 2]}, 2, 0)
    assert compare(fast, fast)["only_slow"] == {}


def test_ranges():
    assert _ranges([9, 3, 4, 5, 11, 12]) == "3-5, 9, 11-12"
    assert _ranges([]) == ""
