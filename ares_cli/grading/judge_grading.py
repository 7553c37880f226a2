"""Grading with a model judge behind the rules (``RULES+judge``) or instead of them (``judge``).

:class:`JudgedGrading` has the grading surface of :class:`~ares_cli.grading.pool.GradingPool` that the
sampling stages use (``grade``, ``gold_for``, ``grader``, ``stats``, ``equivalence_classes_batch``, a
context manager), so ``ares eval`` and ``ares passrate`` take a judge grader like any other.
:func:`open_grading` picks the pool or the judged grading for a grader name; the judge itself (a model
behind a generation backend) comes from :func:`ares_cli.stages.judge_model.prepare_judge`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ares_cli.errors import UsageError
from ares_cli.grading.extract import extract_boxed
from ares_cli.grading.graders import CORRECT, INCORRECT, INVALID
from ares_cli.grading.judge import (
    addresses_grader,
    judge_gold,
    parse_judge_grader,
    read_judge_gold,
    rules_spec,
    subject_of,
)
from ares_cli.grading.pool import GradeResult, GradingPool

__all__ = ["Judge", "JudgedGrading", "grader_label", "open_grading"]


class Judge(Protocol):
    """What grading needs of a judge (:class:`ares_cli.stages.judge_model.ModelJudge` is the model one)."""

    label: str

    def decide(self, questions: Sequence[tuple[str, ...]]) -> list[bool | None]:
        """Per (gold, answer[, problem]): True (equivalent), False (different) or None (unreadable)."""
        ...


class JudgedGrading:
    """The rules in a worker pool, then the judge on what they grade ``invalid`` (module docstring)."""

    def __init__(self, grader: str, judge: Judge, *, workers: int = 2, timeout_s: float = 10.0):
        parsed = parse_judge_grader(grader)
        if parsed is None:
            raise UsageError(f"{grader!r} is not a judge grader")
        self.judge_only = parsed.rules is None
        spec = "math_verify" if self.judge_only else rules_spec(parsed)  # votes: the rules' equivalence
        self.pool = GradingPool(spec, workers=workers, timeout_s=timeout_s)
        self.judge, self.name = judge, grader

    def __enter__(self) -> JudgedGrading:
        self.pool.start()
        return self

    def __exit__(self, *exc) -> None:
        self.pool.close()

    @property
    def grader(self) -> str:
        return self.judge.label if self.judge_only else f"{self.pool.grader}+{self.judge.label}"

    @property
    def stats(self) -> dict[str, Any]:
        return self.pool.stats

    def gold_for(self, problem: dict) -> str:
        """The rules' gold with the problem's text, which the judge reads (:func:`judge_gold`)."""
        return judge_gold(self.pool.gold_for(problem), str(problem.get("problem") or "") or None)

    def _rules(self, items: Sequence[tuple[str, str | None]], extracted: bool) -> list[GradeResult]:
        if not self.judge_only:
            return self.pool.grade(items, extracted=extracted)
        answers = [
            (t.strip() or None if t is not None else None) if extracted else extract_boxed(t)
            for _, t in items
        ]
        return [GradeResult(a, INVALID, self.judge.label) for a in answers]

    def grade(self, items: Sequence[tuple[str, str | None]], *, extracted: bool = False) -> list[GradeResult]:
        """The rules' grades, with every ``invalid`` one decided by the judge (cached by problem, gold and
        answer). A candidate that addresses the grader is not asked: it is ``incorrect``.

        An unreadable judge output leaves the rules' grade: ``incorrect`` when an answer was extracted
        (and rules ran), else ``invalid``."""
        golds = [read_judge_gold(str(gold)) for gold, _ in items]
        results = self._rules([(g, t) for (g, _), (_, t) in zip(golds, items, strict=True)], extracted)
        asks, out = [], list(results)
        for i, ((gold, problem), (_, text), r) in enumerate(zip(golds, items, results, strict=True)):
            subject = subject_of(None if extracted else text, r.extracted) if r.grade == INVALID else None
            if subject is not None and addresses_grader(subject):
                out[i] = GradeResult(r.extracted, INCORRECT, r.grader, "addresses the grader: not judged")
            elif subject is not None:
                asks.append((i, gold, subject, problem))
        verdicts = self.judge.decide([(g, s, p) for _, g, s, p in asks])
        for (i, *_), verdict in zip(asks, verdicts, strict=True):
            r = results[i]
            if verdict is None:
                fallback = INCORRECT if r.extracted and not self.judge_only else INVALID
                out[i] = GradeResult(r.extracted, fallback, r.grader, "judge output unreadable")
            else:
                detail = "judge: equivalent" if verdict else "judge: different"
                out[i] = GradeResult(r.extracted, CORRECT if verdict else INCORRECT, self.judge.label, detail)
        return out

    def equivalence_classes_batch(self, groups, **kwargs) -> list[list[int]]:
        return self.pool.equivalence_classes_batch(groups, **kwargs)


def grader_label(grader: str, *, trust_code: bool = False) -> str:
    """The provenance label of a grader name (its version included), for a stage's cache key
    (``trust_code``: the user's ``--trust-grader-code``, for a module path)."""
    from ares_cli.grading.judge import PROMPT_VERSION
    from ares_cli.grading.registry import resolve_grader

    parsed = parse_judge_grader(grader)
    if parsed is None:
        return resolve_grader(grader, trust_code=trust_code).label
    judge = f"judge-p{PROMPT_VERSION}"
    return judge if parsed.rules is None else f"{rules_spec(parsed).label}+{judge}"


def open_grading(
    grader: str, *, workers: int, timeout_s: float, judge: Judge | None, trust_code: bool = False
):
    """A GradingPool for a rule grader (``trust_code``: a module path is allowed, the user's
    ``--trust-grader-code``), a JudgedGrading for a judge grader (which needs ``judge``)."""
    if parse_judge_grader(grader) is None:
        return GradingPool(grader, workers=workers, timeout_s=timeout_s, trust_code=trust_code)
    if judge is None:
        raise UsageError(f"grader {grader!r} needs a judge (ares_cli.stages.judge_model.prepare_judge)")
    return JudgedGrading(grader, judge, workers=workers, timeout_s=timeout_s)
