"""Grade cache object keyed by (grader label, gold, grader input); lives as long as its owner wants."""

from __future__ import annotations

from collections.abc import Iterable

from ares_cli.grading.graders import CORRECT, INCORRECT, INVALID, TIMEOUT

CacheKey = tuple[str, str, str]


class GradeCache:
    """In-memory map of verified grades.

    Only reproducible outcomes are stored (correct, incorrect, invalid and, by default, timeout: an answer
    that hung once is not retried). ``error`` (e.g. a worker death) is never cached.
    """

    def __init__(self, *, cache_timeouts: bool = True):
        self._grades: dict[CacheKey, str] = {}
        self._cacheable = {CORRECT, INCORRECT, INVALID} | ({TIMEOUT} if cache_timeouts else set())
        self.hits = 0
        self.misses = 0

    def get(self, key: CacheKey) -> str | None:
        grade = self._grades.get(key)
        if grade is None:
            self.misses += 1
        else:
            self.hits += 1
        return grade

    def put(self, key: CacheKey, grade: str) -> None:
        if grade in self._cacheable:
            self._grades[key] = grade

    def update(self, items: Iterable[tuple[CacheKey, str]]) -> None:
        for key, grade in items:
            self.put(key, grade)

    def __len__(self) -> int:
        return len(self._grades)

    def __contains__(self, key: object) -> bool:
        return key in self._grades
