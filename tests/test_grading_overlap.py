"""Grading overlapped with generation: the pool's background ``submit``, the backend's per-batch callback,
and an RL run that grades each decode batch while the next decodes, against grading after generation."""

from __future__ import annotations

import json
import time

import pytest
import torch
from test_rl import _cfg, _train

from ares_cli.grading import GradingPool

ITEMS = [(str(i % 5), rf"\boxed{{{i % 3}}}") for i in range(30)]


def slow_parity(gold: str, response: str) -> bool:
    """A grader slow enough that a submitted call is still running when the caller acts."""
    time.sleep(0.02)
    return response.endswith("0}")


def test_submitted_calls_return_what_grade_returns_and_a_grade_call_waits_its_turn():
    with GradingPool("boxed_int", workers=1, timeout_s=5.0) as pool:
        expected = [r.grade for r in pool.grade(ITEMS)]
    with GradingPool("boxed_int", workers=1, timeout_s=5.0) as pool:
        futures = [pool.submit(ITEMS[i : i + 7]) for i in range(0, len(ITEMS), 7)]
        between = pool.grade(ITEMS[:3])  # runs after the submitted calls, not beside them
        got = [r.grade for batch in pool.collect(futures) for r in batch]
    assert got == expected and [r.grade for r in between] == expected[:3]
    assert set(expected) == {"correct", "incorrect"}


def test_close_lets_the_running_call_finish_and_cancels_the_queued_ones():
    with GradingPool(f"{__name__}:slow_parity", workers=1, timeout_s=5.0, trust_code=True) as pool:
        futures = [pool.submit([(str(i), rf"\boxed{{{j}}}") for j in range(10)]) for i in range(4)]
    assert all(f.done() for f in futures)
    finished = [f for f in futures if not f.cancelled()]
    assert finished and [r.grade for r in finished[0].result()] == ["correct"] + ["incorrect"] * 9


class _Recording:
    """A pool that records how it was called (submit per batch, or grade once)."""

    grades_in_background = True

    def __init__(self, pool):
        self.pool, self.calls = pool, []

    def submit(self, items):
        self.calls.append(("submit", len(items)))
        return self.pool.submit(items)

    def collect(self, futures):
        return self.pool.collect(futures)

    def grade(self, items):
        self.calls.append(("grade", len(items)))
        return self.pool.grade(items)


def test_each_decode_batch_is_graded_as_it_finishes_with_the_same_tokens_and_grades(tiny_model_dir):
    from transformers import AutoTokenizer

    from ares_cli.generation import GenerationRequest, SamplingParams
    from ares_cli.generation.hf import HFBackend
    from ares_cli.models import load_model
    from ares_cli.training.rl.rollout import generate_and_grade

    backend = HFBackend.from_model(load_model(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir),
                                   batch_size=5)  # fmt: skip
    requests = [GenerationRequest(prompt=f"What is {i} + {i}?", seeds=[10 * i + s for s in range(4)], key=str(i))
                for i in range(3)]  # fmt: skip
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=8)
    golds = ["1", "2", "3"]
    runs = {}
    with GradingPool(f"{__name__}:slow_parity", workers=1, timeout_s=5.0, trust_code=True) as raw:
        for overlap in (False, True):
            pool = _Recording(raw)
            completions, grades = generate_and_grade(
                backend, requests, sampling, golds, pool, overlap=overlap
            )
            runs[overlap] = ([[c.token_ids for c in comps] for comps in completions], [g.grade for g in grades],
                             pool.calls)  # fmt: skip
    assert runs[True][:2] == runs[False][:2]
    assert runs[False][2] == [("grade", 12)]
    assert runs[True][2] == [("submit", 5), ("submit", 5), ("submit", 2)]  # 12 rows, 5 per decode batch
    backend.batch_size = 12  # one decode batch: nothing decodes while it grades, so it grades after
    with GradingPool("boxed_int", workers=1, timeout_s=5.0) as raw:
        pool = _Recording(raw)
        generate_and_grade(backend, requests, sampling, golds, pool, overlap=True)
    assert pool.calls == [("grade", 12)]


def test_a_backend_without_batch_reports_grades_after_generation():
    from ares_cli.generation import Completion, GenerationRequest
    from ares_cli.training.rl.rollout import generate_and_grade

    class OneCall:
        batch_size = 1

        def generate(self, requests, sampling):
            return [[Completion(text=r"\boxed{1}", token_ids=[1], finish_reason="stop")] for _ in requests]

    requests = [GenerationRequest(prompt="q", seeds=[0]), GenerationRequest(prompt="q", seeds=[1])]
    with GradingPool("boxed_int", workers=1, timeout_s=5.0) as raw:
        pool = _Recording(raw)
        _, grades = generate_and_grade(OneCall(), requests, None, ["1", "2"], pool, overlap=True)
    assert [g.grade for g in grades] == ["correct", "incorrect"] and pool.calls == [("grade", 2)]


def test_an_rl_run_grading_each_batch_as_it_decodes_is_the_run_grading_after(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    from ares_cli.data.loader import load_problems

    val = load_problems("toy-val", limit=3).records
    sets = ("algo=grpo", "rollout.batch_size=3", "val.every=1", "val.k=2")
    for overlap in ("true", "false"):
        _train(_cfg(*sets, f"grading.overlap={overlap}"), tiny_model_dir, tmp_path / overlap, val)

    def rows(run):
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/") and k != "tokens_per_s"}
                for line in lines]  # fmt: skip

    assert rows("true") == rows("false") and len(rows("true")) == 3
    on, off = (load_file(str(tmp_path / run / "model/model.safetensors")) for run in ("true", "false"))
    for name in on:
        assert torch.equal(on[name], off[name]), name


def test_overlap_is_a_boolean_option():
    from ares_cli.errors import UsageError

    assert _cfg().grading.overlap is True
    with pytest.raises(UsageError, match="overlap"):
        _cfg("grading.overlap=sometimes")
