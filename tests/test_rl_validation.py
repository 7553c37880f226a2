"""Validation pass@k, best-checkpoint selection (PAEC: best AIME23 Pass@16) and the weak format reward."""

from __future__ import annotations

import pytest
import torch
from test_rl import _cfg, _rows, _train


def test_format_reward_appendix_b2():
    from ares_cli.training.rl.config import RewardConfig
    from ares_cli.training.rl.rewards import response_reward

    cfg = RewardConfig(format_reward=0.05)
    got = [response_reward(g, 5, cfg, 20) for g in ("correct", "incorrect", "invalid", "timeout")]
    assert got == pytest.approx([1.05, 0.05, 0.0, 0.0])


@pytest.mark.parametrize("select_by", ["pass_at_k", "accuracy"])
def test_best_validated_step_becomes_the_output_model(select_by, tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    from ares_cli.data.loader import load_problems

    val = load_problems("toy-val", limit=4).records
    cfg = _cfg("steps=3", "val.every=1", "val.k=3", "val.temperature=1.0", f"val.select_by={select_by}",
               "optim.lr=5e-2")  # fmt: skip
    result = _train(cfg, tiny_model_dir, tmp_path, val)
    rows = [r for r in _rows(tmp_path / "metrics.jsonl") if r["step"] > 0]
    key = "val/pass_at_k" if select_by == "pass_at_k" else "val/accuracy"
    assert all(0.0 <= r["val/pass_at_k"] <= 1.0 and r["val/pass_at_k"] >= r["val/accuracy"] for r in rows)
    scores = [r[key] for r in rows]
    best = rows[scores.index(max(scores))]["step"]  # the earliest step wins a tie
    assert result.stats["selected_step"] == best and result.stats["selected_score"] == pytest.approx(
        max(scores)
    )
    assert not (tmp_path / "best-model").exists()
    assert (tmp_path / "last-model").exists() == (best != 3)
    if best != 3:  # the output is the best step's weights, not the last step's
        a = load_file(str(tmp_path / "model/model.safetensors"))
        b = load_file(str(tmp_path / "last-model/model.safetensors"))
        assert any(not torch.equal(a[k], b[k]) for k in a)


def test_paec_recipe_validates_on_aime2023_by_pass_at_16():
    from pathlib import Path

    from ares_cli.training.rl.config import resolve_rl_config

    path = Path(__file__).resolve().parents[1] / "pipelines/rl/paec-qwen2.5-math-1.5b.yaml"
    cfg = resolve_rl_config(yaml_path=path)
    assert (cfg.val.k, cfg.val.select_by, cfg.val.every, cfg.reward.format_reward) == (
        16,
        "pass_at_k",
        10,
        0.05,
    )
    assert "--val-data aime2023" in path.read_text()
    assert (Path(__file__).resolve().parents[1] / "data_manifests/aime2023.yaml").is_file()
