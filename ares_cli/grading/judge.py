"""A model judge for answers no rule can grade: ``--grader judge``, ``judge:MODEL``, ``math+judge``.

``judge`` asks a judge model, for every sample, whether the response's final answer matches the gold;
``RULES+judge`` (``math+judge``) grades with the rules first and asks the judge only where the rules say
``invalid``: no boxed answer, or (for ``math``) an answer the rules cannot read
(:func:`ares_cli.grading.math_grader.math_triage_grade`). The judge runs through the generation backends
(``hf`` on CPU, ``vllm`` on GPU, ``replay`` for scripted verdicts in tests; the model side is
:mod:`ares_cli.stages.judging`):

- the prompt is :data:`JUDGE_PROMPT` (version :data:`PROMPT_VERSION`), through the judge's chat template,
  with the extracted answer, or the end of the response when it has no boxed answer;
- decoding is greedy (temperature 0) with ``judge.max_new_tokens``; the verdict is the last ``EQUIVALENT``
  or ``DIFFERENT`` in the output (``NOT EQUIVALENT`` is different); an output with neither is
  *unreadable* and the sample keeps the rules' grade (incorrect, or invalid without an answer);
- verdicts are cached by (gold, answer) for the run and written to the artifact; every grade the judge
  decides carries the judge's label (``judge==<model id>+p<version>``) instead of the rules'.

Majority votes group answers by the rules' equivalence (a judge per pair would cost K² calls).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from ares_cli.errors import UsageError
from ares_cli.grading.registry import JUDGE_NAME, resolve_grader

__all__ = [
    "JUDGE",
    "JUDGE_PROMPT",
    "PROMPT_VERSION",
    "JudgeGrader",
    "check_judge_grader",
    "judge_key",
    "judge_model",
    "judge_prompt",
    "parse_judge_grader",
    "read_verdict",
    "rules_spec",
    "subject_of",
]

JUDGE = "judge"
PROMPT_VERSION = 1
TAIL_CHARS = 1500
JUDGE_PROMPT = """\
You are checking the final answer of a math solution against the reference answer.

Reference answer:
{gold}

Final answer of the solution (or, when it has no boxed answer, the end of the solution):
{answer}

Is the final answer mathematically equivalent to the reference answer (the same value, set, expression or \
statement, possibly written differently)? Reply with one word: EQUIVALENT or DIFFERENT."""
_VERDICT = re.compile(r"\b(not\s+equivalent|equivalent|different)\b", re.I)


@dataclass(frozen=True)
class JudgeGrader:
    """A judge grader name read apart: the rules it follows (None: the judge alone) and its model."""

    rules: str | None
    model: str | None


def parse_judge_grader(name: str | None) -> JudgeGrader | None:
    """``judge``, ``judge:MODEL``, ``RULES+judge``, ``RULES+judge:MODEL``; None for any other grader."""
    m = JUDGE_NAME.match(name or "")
    return None if m is None else JudgeGrader(m.group("rules"), m.group("model"))


def judge_model(grader: JudgeGrader, cfg) -> str | None:
    """The judge's model: the grader's own (``judge:MODEL``), else ``cfg.model``."""
    return grader.model or cfg.model


def check_judge_grader(name: str, cfg) -> JudgeGrader:
    """The parsed judge grader; UsageError when its rules are unknown or it has no model to ask
    (``cfg``: the stage's judge settings, :class:`ares_cli.stages.judging.JudgeConfig`)."""
    grader = parse_judge_grader(name)
    if grader is None:
        raise UsageError(f"{name!r} is not a judge grader")
    if grader.rules is not None:
        rules_spec(grader)
    if cfg.backend == "replay":
        if not cfg.replay_file:
            raise UsageError(f"grader {name!r}: the replay judge needs judge.replay_file")
    elif judge_model(grader, cfg) is None:
        raise UsageError(f"grader {name!r} names no judge model: use judge:MODEL or --set judge.model=MODEL")
    return grader


def rules_spec(grader: JudgeGrader):
    """The worker grader of the rules part: ``math`` hands what it cannot read over as ``invalid``."""
    rules = grader.rules or "math_verify"
    spec = resolve_grader(rules)
    if spec.with_options or ":" in rules:
        raise UsageError(f"grader {rules}+judge: only registry graders of answers can go before a judge")
    if spec.name == "math_verify":
        return spec.retarget("math_verify/triage", "ares_cli.grading.math_grader:math_triage_grade")
    return spec


def judge_prompt(gold: str, answer: str) -> str:
    """The fixed judge prompt for one (gold, answer) pair."""
    return JUDGE_PROMPT.format(gold=gold.strip(), answer=answer.strip())


def judge_key(gold: str, answer: str) -> str:
    """The replay key of a (gold, answer) pair (a scripted judge file names its rows by it)."""
    return "judge/" + hashlib.sha256(f"{gold}\x1f{answer}".encode()).hexdigest()[:20]


def read_verdict(text: str) -> bool | None:
    """True for equivalent, False for different, None when the output says neither (the last one counts)."""
    found = _VERDICT.findall(text or "")
    if not found:
        return None
    return found[-1].lower() == "equivalent"


def subject_of(response: str | None, extracted: str | None) -> str | None:
    """What the judge reads: the extracted answer, else the end of the response (None when empty)."""
    if extracted:
        return extracted
    tail = (response or "").strip()[-TAIL_CHARS:]
    return tail or None
