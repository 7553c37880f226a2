"""The model side of the judge graders: settings, the judge model behind a generation backend, and its
record in the artifact (:mod:`ares_cli.grading.judge` has the names, prompt and verdicts;
:mod:`ares_cli.grading.judge_grading` grades with it).

:func:`prepare_judge` resolves the judge model like a stage's model (an input with role ``judge``, so a
different judge is a different artifact); :class:`ModelJudge` asks it greedily, one generation per
(gold, answer) not seen before in the run; the verdicts are written to ``judge_verdicts.jsonl`` and read
back when a partial run resumes.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ares_cli.config import option
from ares_cli.errors import UsageError
from ares_cli.grading.judge import (
    JUDGE,
    JUDGE_PROMPT,
    PROMPT_VERSION,
    judge_key,
    judge_model,
    judge_prompt,
    parse_judge_grader,
    read_verdict,
)

VERDICTS_FILE = "judge_verdicts.jsonl"


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
    gpu_memory_utilization: float = option(
        0.2, "The judge's share of the one GPU budget it shares with the sampled model's vLLM engine "
        "(0.9 of the GPU): a vllm judge is built with it, the sampled model's engine gets the rest.",
        gt=0.0, lt=0.8,
    )  # fmt: skip


class ModelJudge:
    """Verdicts from a judge model, greedy, one generation per (gold, answer) not seen before."""

    def __init__(self, backend_factory: Callable[[], Any], model_id: str, cfg: JudgeConfig):
        self._factory, self._backend = backend_factory, None
        self.model_id, self.cfg = model_id, cfg
        self.label = f"{JUDGE}=={model_id}+p{PROMPT_VERSION}"
        self.verdicts: dict[tuple[str, str], dict[str, Any]] = {}
        self.stats = {"asked": 0, "cached": 0, "equivalent": 0, "different": 0, "unreadable": 0}
        self.stats["generate_s"] = 0.0

    def _generate(self, questions: list[tuple[str, str, str | None]]) -> list[str]:
        from ares_cli.generation import GenerationRequest, SamplingParams, render_prompt

        if self._backend is None:
            self._backend = self._factory()
        tokenizer = getattr(self._backend, "tokenizer", None)
        if tokenizer is None and hasattr(self._backend, "llm"):  # vllm
            tokenizer = self._backend.llm.get_tokenizer()
        requests = []
        for gold, answer, problem in questions:
            prompt = judge_prompt(gold, answer, problem)
            requests.append(GenerationRequest(
                prompt=render_prompt(tokenizer, prompt) if tokenizer else prompt, seeds=(0,),
                key=judge_key(gold, answer, problem),
            ))  # fmt: skip
        sampling = SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=self.cfg.max_new_tokens)
        started = time.perf_counter()
        outputs = self._backend.generate(requests, sampling)
        self.stats["generate_s"] += time.perf_counter() - started
        return [comps[0].text for comps in outputs]

    def decide(self, questions: Sequence[tuple[str, ...]]) -> list[bool | None]:
        """The verdict per (gold, answer[, problem]) question: True (equivalent), False (different) or
        None (unreadable)."""
        keyed = [(q[0], q[1], q[2] if len(q) > 2 else None) for q in questions]
        new = [q for q in dict.fromkeys(keyed) if q not in self.verdicts]
        self.stats["cached"] += len(keyed) - len(new)
        for (gold, answer, problem), text in zip(new, self._generate(new) if new else [], strict=True):
            verdict = read_verdict(text)
            name = {True: "equivalent", False: "different", None: "unreadable"}[verdict]
            self.stats[name] += 1
            row = {"gold": gold, "answer": answer, "verdict": name, "output": text}
            self.verdicts[(gold, answer, problem)] = row | ({"problem": problem} if problem else {})
        self.stats["asked"] += len(new)
        return [read_verdict(self.verdicts[q]["output"]) for q in keyed]

    def load(self, rows: Sequence[dict[str, Any]]) -> None:
        """Verdicts written earlier (a resumed run) are not asked again."""
        for r in rows:
            self.verdicts[(r["gold"], r["answer"], r.get("problem"))] = dict(r)

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


def prepare_judge(store, graders: Sequence[str], cfg: JudgeConfig) -> tuple[ModelJudge | None, list]:
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
        return ModelJudge(lambda: get_backend("replay", replay_file), f"replay@{ref.sha256[:12]}", cfg), [ref]
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
    if backend == "vllm":  # beside the sampled model's engine, under one budget (sampling.gpu_shares)
        options = {"gpu_memory_utilization": cfg.gpu_memory_utilization}
    model_id = f"{Path(str(model)).name or model}@{ref.sha256[:12]}"
    return ModelJudge(lambda: get_backend(backend, path, **options), model_id, cfg), [ref]


def load_verdicts(judge: ModelJudge | None, directory: Path) -> None:
    """Verdicts a partial run already wrote (``judge_verdicts.jsonl``) are not asked again on resume."""
    path = directory / VERDICTS_FILE
    if judge is not None and path.is_file():
        judge.load([json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line])


def save_verdicts(judge: ModelJudge | None, directory: Path) -> dict[str, Any] | None:
    """Write the verdicts next to the samples; the judge's manifest record (None without a judge)."""
    if judge is None:
        return None
    from ares_cli.data.jsonl import write_jsonl

    write_jsonl(directory / VERDICTS_FILE, judge.records())
    return judge.manifest_record()
