"""A model judge for answers no rule can grade: ``--grader judge``, ``judge:MODEL``, ``math+judge``.

``judge`` asks a judge model, for every sample, whether the response's final answer matches the gold;
``RULES+judge`` (``math+judge``) grades with the rules first and asks the judge only where the rules say
``invalid``: no boxed answer, or (for ``math``) an answer the rules cannot read
(:func:`ares_cli.grading.math_grader.math_triage_grade`). The judge runs through the generation backends
(``hf`` on CPU, ``vllm`` on GPU, ``replay`` for scripted verdicts in tests):

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ares_cli.config import option
from ares_cli.errors import UsageError

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
_NAME = re.compile(r"^(?:(?P<rules>[A-Za-z_][\w.]*)\+)?judge(?::(?P<model>.+))?$")


@dataclass(frozen=True)
class JudgeConfig:
    """The judge model and how it is asked."""

    model: str | None = option(
        None, "Judge model (artifact, model directory or HF id) for judge graders; judge:MODEL names it too."
    )
    backend: str = option("auto", "Judge generation backend: auto, hf, vllm, replay (scripted verdicts).")
    max_new_tokens: int = option(16, "Judge's greedy generation budget (its verdict is one word).", ge=1)
    replay_file: str | None = option(None, "Scripted verdicts JSONL for the replay judge (keys: judge_key).")
    batch_size: int = option(16, "Judge prompts per forward pass (hf backend).", ge=1)


@dataclass(frozen=True)
class JudgeGrader:
    """A judge grader name read apart: the rules it follows (None: the judge alone) and its model."""

    rules: str | None
    model: str | None


def parse_judge_grader(name: str | None) -> JudgeGrader | None:
    """``judge``, ``judge:MODEL``, ``RULES+judge``, ``RULES+judge:MODEL``; None for any other grader."""
    m = _NAME.match(name or "")
    return None if m is None else JudgeGrader(m.group("rules"), m.group("model"))


def judge_model(grader: JudgeGrader, cfg: JudgeConfig) -> str | None:
    return grader.model or cfg.model


def check_judge_grader(name: str, cfg: JudgeConfig) -> JudgeGrader:
    """The parsed judge grader; UsageError when its rules are unknown or it has no model to ask."""
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
    from dataclasses import replace

    from ares_cli.grading.registry import ALIASES, resolve_grader

    rules = grader.rules or "math_verify"
    spec = resolve_grader(rules)
    if spec.with_options or ":" in rules:
        raise UsageError(f"grader {rules}+judge: only registry graders of answers can go before a judge")
    if ALIASES.get(rules, rules) == "math_verify":
        return replace(
            spec, name="math_verify/triage", target="ares_cli.grading.math_grader:math_triage_grade"
        )
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


class Judge:
    """Verdicts from a judge model, greedy, one generation per (gold, answer) not seen before."""

    def __init__(self, backend_factory: Callable[[], Any], model_id: str, cfg: JudgeConfig):
        self._factory, self._backend = backend_factory, None
        self.model_id, self.cfg = model_id, cfg
        self.label = f"{JUDGE}=={model_id}+p{PROMPT_VERSION}"
        self.verdicts: dict[tuple[str, str], dict[str, Any]] = {}
        self.stats = {"asked": 0, "cached": 0, "equivalent": 0, "different": 0, "unreadable": 0}
        self.stats["generate_s"] = 0.0

    def _generate(self, pairs: list[tuple[str, str]]) -> list[str]:
        from ares_cli.generation import GenerationRequest, SamplingParams, render_prompt
        from ares_cli.stages.sampling import backend_tokenizer

        if self._backend is None:
            self._backend = self._factory()
        tokenizer = backend_tokenizer(self._backend)
        requests = [
            GenerationRequest(
                prompt=render_prompt(tokenizer, judge_prompt(g, a)) if tokenizer else judge_prompt(g, a),
                seeds=(0,),
                key=judge_key(g, a),
            )
            for g, a in pairs
        ]
        sampling = SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=self.cfg.max_new_tokens)
        started = time.perf_counter()
        outputs = self._backend.generate(requests, sampling)
        self.stats["generate_s"] += time.perf_counter() - started
        return [comps[0].text for comps in outputs]

    def decide(self, pairs: Sequence[tuple[str, str]]) -> list[bool | None]:
        """The verdict per pair: True (equivalent), False (different) or None (unreadable)."""
        new = [p for p in dict.fromkeys(pairs) if p not in self.verdicts]
        self.stats["cached"] += len(pairs) - len(new)
        for (gold, answer), text in zip(new, self._generate(new) if new else [], strict=True):
            verdict = read_verdict(text)
            name = {True: "equivalent", False: "different", None: "unreadable"}[verdict]
            self.stats[name] += 1
            self.verdicts[(gold, answer)] = {"gold": gold, "answer": answer, "verdict": name, "output": text}
        self.stats["asked"] += len(new)
        return [read_verdict(self.verdicts[p]["output"]) for p in pairs]

    def load(self, rows: Sequence[dict[str, Any]]) -> None:
        """Verdicts written earlier (a resumed run) are not asked again."""
        for r in rows:
            self.verdicts[(r["gold"], r["answer"])] = dict(r)

    def records(self) -> list[dict[str, Any]]:
        return list(self.verdicts.values())

    def manifest_record(self) -> dict[str, Any]:
        """What the artifact's manifest records of the judge."""
        return {
            "label": self.label,
            "model": self.model_id,
            "backend": self.cfg.backend,
            "prompt_version": PROMPT_VERSION,
            "prompt_sha256": hashlib.sha256(JUDGE_PROMPT.encode()).hexdigest(),
            "decoding": {"temperature": 0.0, "max_new_tokens": self.cfg.max_new_tokens},
            **self.stats,
        }
