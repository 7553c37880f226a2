"""Grading with a model judge behind the rules (``RULES+judge``) or instead of them (``judge``).

:class:`JudgedGrading` has the grading surface of :class:`~ares_cli.grading.pool.GradingPool` that the
sampling stages use (``grade``, ``gold_for``, ``grader``, ``stats``, ``equivalence_classes_batch``, a
context manager), so ``ares eval`` and ``ares passrate`` take a judge grader like any other.
:func:`prepare_judge` resolves the judge model (an input of the stage, so a different judge is a
different artifact) and :func:`open_grading` picks the pool or the judged grading for a grader name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ares_cli.errors import UsageError
from ares_cli.grading.extract import extract_boxed
from ares_cli.grading.graders import CORRECT, INCORRECT, INVALID
from ares_cli.grading.judge import Judge, JudgeConfig, judge_model, parse_judge_grader, rules_spec, subject_of
from ares_cli.grading.pool import GradeResult, GradingPool

VERDICTS_FILE = "judge_verdicts.jsonl"


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
        return self.pool.gold_for(problem)

    def _rules(self, items: Sequence[tuple[str, str | None]], extracted: bool) -> list[GradeResult]:
        if not self.judge_only:
            return self.pool.grade(items, extracted=extracted)
        answers = [
            (t.strip() or None if t is not None else None) if extracted else extract_boxed(t)
            for _, t in items
        ]
        return [GradeResult(a, INVALID, self.judge.label) for a in answers]

    def grade(self, items: Sequence[tuple[str, str | None]], *, extracted: bool = False) -> list[GradeResult]:
        """The rules' grades, with every ``invalid`` one decided by the judge (cached by gold and answer).

        An unreadable judge output leaves the rules' grade: ``incorrect`` when an answer was extracted
        (and rules ran), else ``invalid``."""
        results = self._rules(items, extracted)
        asks = []
        for i, ((gold, text), r) in enumerate(zip(items, results, strict=True)):
            subject = subject_of(None if extracted else text, r.extracted) if r.grade == INVALID else None
            if subject is not None:
                asks.append((i, str(gold), subject))
        verdicts = self.judge.decide([(g, s) for _, g, s in asks])
        out = list(results)
        for (i, _, _), verdict in zip(asks, verdicts, strict=True):
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


def grader_label(grader: str) -> str:
    """The provenance label of a grader name (its version included), for a stage's cache key."""
    from ares_cli.grading.judge import PROMPT_VERSION
    from ares_cli.grading.registry import resolve_grader

    parsed = parse_judge_grader(grader)
    if parsed is None:
        return resolve_grader(grader).label
    judge = f"judge-p{PROMPT_VERSION}"
    return judge if parsed.rules is None else f"{rules_spec(parsed).label}+{judge}"


def open_grading(grader: str, *, workers: int, timeout_s: float, judge: Judge | None):
    """A GradingPool for a rule grader, a JudgedGrading for a judge grader (which needs ``judge``)."""
    if parse_judge_grader(grader) is None:
        return GradingPool(grader, workers=workers, timeout_s=timeout_s)
    if judge is None:
        raise UsageError(f"grader {grader!r} needs a judge (prepare_judge)")
    return JudgedGrading(grader, judge, workers=workers, timeout_s=timeout_s)


def prepare_judge(store, graders: Sequence[str], cfg: JudgeConfig) -> tuple[Judge | None, list]:
    """The judge of a run's judge graders and its input refs ([] and None when no grader is a judge).

    One judge model per run. The model is resolved like a stage's model (artifact, directory, HF id) and
    becomes an input with role ``judge``; a replay judge's input is its verdicts file."""
    from ares_cli.generation import get_backend, resolve_backend_name

    parsed = [p for p in (parse_judge_grader(g) for g in graders) if p is not None]
    if not parsed:
        return None, []
    if cfg.backend == "replay":
        if not cfg.replay_file:
            raise UsageError("the replay judge needs judge.replay_file (scripted verdicts)")
        ref = store.input_ref("judge", cfg.replay_file)
        replay_file = cfg.replay_file
        return Judge(lambda: get_backend("replay", replay_file), f"replay@{ref.sha256[:12]}", cfg), [ref]
    from ares_cli.stages.inputs import resolve_model

    models = {judge_model(p, cfg) for p in parsed}
    if None in models:
        raise UsageError("a judge grader names no judge model: use judge:MODEL or --set judge.model=MODEL")
    if len(models) > 1:
        raise UsageError(f"one judge model per run, got {sorted(models)}")
    model = models.pop()
    path, ref = resolve_model(store, model, role="judge")
    backend = resolve_backend_name(cfg.backend)
    options = {"batch_size": cfg.batch_size} if backend == "hf" else {}
    model_id = f"{Path(str(model)).name or model}@{ref.sha256[:12]}"
    return Judge(lambda: get_backend(backend, path, **options), model_id, cfg), [ref]


def load_verdicts(judge: Judge | None, directory: Path) -> None:
    """Verdicts a partial run already wrote (``judge_verdicts.jsonl``) are not asked again on resume."""
    path = directory / VERDICTS_FILE
    if judge is not None and path.is_file():
        judge.load([json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line])


def save_verdicts(judge: Judge | None, directory: Path) -> dict[str, Any] | None:
    """Write the verdicts next to the samples; the judge's manifest record (None without a judge)."""
    if judge is None:
        return None
    from ares_cli.data.jsonl import write_jsonl

    write_jsonl(directory / VERDICTS_FILE, judge.records())
    return judge.manifest_record()
