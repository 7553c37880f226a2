"""A model judge beside the sampled model's vLLM engine shares one GPU budget with it (0.9 of the GPU): the
judge's vllm engine is built with ``judge.gpu_memory_utilization``, the sampled model's with the rest,
checked against the strict vLLM stand-in (tests/vllm_standin.py), and ``ares plan`` budgets the same."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
TOY = REPO / "ares_cli" / "toy" / "base"


@pytest.fixture
def standin(monkeypatch):
    import vllm_standin

    monkeypatch.setitem(sys.modules, "vllm", vllm_standin.module())
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    vllm_standin.StrictLLM.instances.clear()
    return vllm_standin.StrictLLM.instances


def _cfg(**kw):
    from ares_cli.stages.judge_model import JudgeConfig
    from ares_cli.stages.sampling import SamplingConfig

    judge = kw.pop("judge", {})
    return SamplingConfig(backend="vllm", judge=JudgeConfig(**judge), **kw)


def test_the_sampled_models_engine_leaves_the_judges_share(standin):
    from ares_cli.stages.sampling import gpu_shares, open_backend

    cfg = _cfg(grader="judge:some-judge", judge={"gpu_memory_utilization": 0.3})
    assert gpu_shares(cfg) == (0.6, 0.3)
    open_backend(cfg, str(TOY))
    assert standin[-1].kw["gpu_memory_utilization"] == 0.6


def test_without_a_model_judge_the_engine_keeps_the_whole_budget(standin):
    from ares_cli.stages.sampling import gpu_shares, open_backend

    assert gpu_shares(_cfg(grader="math_verify")) == (0.9, 0.0)
    assert gpu_shares(_cfg(grader="judge", judge={"backend": "replay", "replay_file": "x.jsonl"})) == (
        0.9,
        0.0,
    )
    open_backend(_cfg(grader="math_verify"), str(TOY))
    assert standin[-1].kw["gpu_memory_utilization"] == 0.9


def test_a_vllm_judge_is_built_with_its_share(standin, tmp_path):
    from ares_cli.stages.judge_model import JudgeConfig, prepare_judge
    from ares_cli.store.artifacts import ArtifactStore

    judge, _ = prepare_judge(ArtifactStore(tmp_path), [f"judge:{TOY}"],
                             JudgeConfig(backend="vllm", gpu_memory_utilization=0.25))  # fmt: skip
    judge._factory()  # what the first question builds
    assert standin[-1].kw["gpu_memory_utilization"] == 0.25


@pytest.mark.parametrize("share", [0.0, 0.8, 1.5])
def test_a_judge_share_that_leaves_the_engine_nothing_is_refused(share):
    from ares_cli.config import check
    from ares_cli.errors import UsageError
    from ares_cli.stages.judge_model import JudgeConfig

    check(JudgeConfig(gpu_memory_utilization=0.2))
    with pytest.raises(UsageError, match="gpu_memory_utilization"):
        check(JudgeConfig(gpu_memory_utilization=share))
