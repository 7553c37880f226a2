"""The records AdaCS curation reads (:mod:`ares_cli.algorithms.curation`): candidates, pass-rate brackets
and problems, and the validation of pass-rate and candidate rows into them (errors name the file, the
1-based row and the field). Pure functions over records: no I/O, no torch.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError

__all__ = ["Candidate", "Bracket", "Problem", "parse_pass_rates", "parse_candidates"]


@dataclass(frozen=True)
class Candidate:
    """One candidate response of a problem (a sample record reduced to what curation reads)."""

    problem_id: str
    sample_idx: int
    response: str
    n_tokens: int
    correct: bool


@dataclass(frozen=True)
class Bracket:
    """A pass-rate bracket n_correct/k; ``label`` like "3/8"; ordered by pass rate, then k."""

    n_correct: int
    k: int
    pass_rate: float = field(compare=False)

    @property
    def label(self) -> str:
        return f"{self.n_correct}/{self.k}"

    @property
    def sort_key(self) -> tuple[Fraction, int]:
        return Fraction(self.n_correct, self.k), self.k


@dataclass(frozen=True)
class Problem:
    """A validated pass-rate record: id, data source and pass-rate bracket."""

    problem_id: str
    source: str
    bracket: Bracket


def parse_pass_rates(
    records: Iterable[Mapping[str, Any]], *, file: str | Path | None = None
) -> list[Problem]:
    """Validate pass-rate records into problems with brackets; ``n_correct`` + ``k`` are authoritative,
    ``pass_rate`` + ``k`` is accepted alone (n_correct = round(pass_rate·k)). Errors name ``file`` and the
    1-based row."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for row, rec in enumerate(records, start=1):
        where = {"file": file, "row": row}
        pid = rec.get("problem_id")
        if pid is None or pid == "":
            raise InputError("pass-rate record without problem_id", **where, field="problem_id")
        pid = str(pid)
        if pid in seen:
            raise InputError(f"duplicate problem_id {pid!r}", **where, field="problem_id")
        seen.add(pid)
        k = rec.get("k")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise InputError(
                f"k must be a positive integer (brackets are n_correct/k), got {k!r}", **where, field="k"
            )
        n = rec.get("n_correct")
        p = rec.get("pass_rate")
        if p is not None and (
            isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0  # NaN fails too
        ):
            raise InputError(f"pass_rate must be a number in [0, 1], got {p!r}", **where, field="pass_rate")
        if n is None:
            if p is None:
                raise InputError("needs n_correct or pass_rate", **where, field="n_correct")
            n = round(float(p) * k)
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= k:
            raise InputError(
                f"n_correct must be an integer in [0, {k}], got {n!r}", **where, field="n_correct"
            )
        if p is not None and abs(float(p) - n / k) > 1e-6:
            raise InputError(f"pass_rate {p} != n_correct/k = {n}/{k}", **where, field="pass_rate")
        problems.append(Problem(pid, str(rec.get("source") or "default"), Bracket(n, k, n / k)))
    return problems


def parse_candidates(
    records: Iterable[Mapping[str, Any] | Candidate],
    *,
    file: str | Path | None = None,
    keep: Collection[str] | None = None,
) -> dict[str, list[Candidate]]:
    """Group candidates by problem_id, sorted by sample_idx. ``correct`` (bool) wins over ``grade``
    (== "correct"); a missing ``sample_idx`` is the candidate's position among its problem's rows.
    ``keep``: only these problems' rows are read. Errors name ``file`` and the 1-based row."""
    by_problem: dict[str, list[Candidate]] = {}
    for row, rec in enumerate(records, start=1):
        if isinstance(rec, Candidate):
            by_problem.setdefault(rec.problem_id, []).append(rec)
            continue
        pid = rec.get("problem_id")
        if pid is None:
            raise InputError("candidate without problem_id", file=file, row=row, field="problem_id")
        pid = str(pid)
        if keep is not None and pid not in keep:
            continue
        if "correct" in rec:
            correct = bool(rec["correct"])
        elif "grade" in rec:
            correct = rec["grade"] == "correct"
        else:
            raise InputError("candidate needs 'correct' or 'grade'", file=file, row=row, field="correct")
        n_tokens = rec.get("n_tokens")
        if not isinstance(n_tokens, int) or isinstance(n_tokens, bool) or n_tokens < 0:
            raise InputError(
                f"n_tokens must be an integer >= 0, got {n_tokens!r}", file=file, row=row, field="n_tokens"
            )
        siblings = by_problem.setdefault(pid, [])
        idx = rec.get("sample_idx")
        if idx is not None and (isinstance(idx, bool) or not isinstance(idx, int)):
            raise InputError(
                f"sample_idx must be an integer, got {idx!r}", file=file, row=row, field="sample_idx"
            )
        siblings.append(
            Candidate(
                pid,
                len(siblings) if idx is None else int(idx),
                str(rec.get("response", "")),
                n_tokens,
                correct,
            )
        )
    for cands in by_problem.values():
        cands.sort(key=lambda c: c.sample_idx)
    return by_problem
