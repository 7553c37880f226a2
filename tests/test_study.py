"""Seeded paired studies: the statistics (hand-computed), the study recipes, and the GRPO baseline arm."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml
from test_rl import _cfg, _rows, _train

from ares_cli.errors import UsageError
from ares_cli.report.study import fmt, fraction_at_or_above, mean_se, paired, relative_change, window_mean

ROOT = Path(__file__).resolve().parent.parent


def test_mean_se_by_hand():
    # [1, 2, 4]: mean 7/3; sample variance ((4/3)^2 + (1/3)^2 + (5/3)^2) / 2 = 7/3; SE sqrt(7/9)
    out = mean_se([1.0, 2.0, 4.0])
    assert (
        out["mean"] == pytest.approx(7 / 3) and out["se"] == pytest.approx(math.sqrt(7 / 9)) and out["n"] == 3
    )
    assert math.isnan(mean_se([5.0])["se"]) and mean_se([])["n"] == 0


def test_paired_difference_by_hand_and_unpaired_seeds_refused():
    out = paired({0: 3.0, 1: 5.0, 2: 6.0}, {0: 2.0, 1: 3.0, 2: 2.0})  # diffs 1, 2, 4
    assert out["diffs"] == {0: 1.0, 1: 2.0, 2: 4.0}
    assert out["mean"] == pytest.approx(7 / 3) and out["se"] == pytest.approx(math.sqrt(7 / 9))
    assert fmt(out) == "+2.333 ± 0.882" and fmt(mean_se([1.0, 2.0, 4.0])) == "2.333 ± 0.882"
    with pytest.raises(UsageError, match=r"unpaired: \[2\]"):
        paired({0: 1.0, 1: 1.0, 2: 1.0}, {0: 1.0, 1: 1.0})


def test_window_statistics():
    rows = [
        {"step": 1, "h": 10.0, "low": float("nan"), "n": 1},
        {"step": 2, "h": 8.0, "low": 9.0, "n": 0},  # empty bucket: its 8.0 is not a measurement
        {"step": 3, "h": 6.0, "low": 5.0, "n": 2},
        {"step": 4, "h": 4.0, "low": 5.0, "n": 1},
    ]
    assert window_mean(rows, "h", 2, 4) == pytest.approx(6.0)
    assert window_mean(rows, "h", 1, 4, where="n") == pytest.approx(20 / 3)
    assert math.isnan(window_mean(rows, "missing", 1, 4))
    # first two steps 9.0, last two 5.0: (5 - 9) / 9
    assert relative_change(rows, "h", 2) == pytest.approx(-4 / 9)
    # step 1's floor is NaN (not yet anchored): of steps 2-4, only step 3 holds h >= low
    assert fraction_at_or_above(rows, "h", "low", 1, 4) == pytest.approx(1 / 3)


def _study():
    spec = yaml.safe_load((ROOT / "studies/mechanisms.yaml").read_text())
    return spec, {arm: yaml.safe_load((ROOT / path).read_text())["rl"] for arm, path in spec["arms"].items()}


def test_study_arms_share_one_budget():
    from ares_cli.training.rl.config import resolve_rl_config

    spec, arms = _study()
    assert "grpo" in arms and len(spec["seeds"]) >= 3
    cfgs = {arm: resolve_rl_config(yaml_path=ROOT / spec["arms"][arm]) for arm in arms}
    base = cfgs["grpo"]
    for arm, cfg in cfgs.items():
        assert (cfg.steps, cfg.optim, cfg.seed) == (base.steps, base.optim, base.seed), arm
        r, b = cfg.rollout, base.rollout
        assert (r.prompts_per_step, r.group_size, r.temperature, r.max_new_tokens) == (
            b.prompts_per_step,
            b.group_size,
            b.temperature,
            b.max_new_tokens,
        ), arm
        assert cfg.filter.mode == "off", arm
        assert r.branching.enabled == (arm == "branching"), arm


GRPO_VIA_AEPO = ("algo=aepo", "kl.coef=1.0", "filter.mode=off", "aepo.reward_shaping=false",
                 "aepo.dynamic_kl=false", "aepo.kl_init=0.001")  # fmt: skip


def test_grpo_arm_trains_exactly_like_grpo(tiny_model_dir, tmp_path):
    """The study's baseline runs GRPO through the AEPO hooks (both components off) only to log the
    per-bucket quantities; its updates must be GRPO's."""
    spec, arms = _study()
    aepo = arms["grpo"]["aepo"]
    assert arms["grpo"]["algo"] == "aepo" and arms["grpo"]["kl"]["coef"] == 1.0
    assert (aepo["reward_shaping"], aepo["dynamic_kl"], aepo["kl_init"]) == (False, False, 0.001)

    runs = {}
    for name, sets in (("grpo", ("algo=grpo", "kl.coef=0.001")), ("via_aepo", GRPO_VIA_AEPO)):
        out = tmp_path / name
        _train(_cfg(*sets), tiny_model_dir, out)
        rows = _rows(out / "metrics.jsonl")
        from safetensors.torch import load_file

        weights = load_file(str(next((out / "model").glob("*.safetensors"))))
        runs[name] = (rows, weights)
    (g_rows, g_w), (a_rows, a_w) = runs["grpo"], runs["via_aepo"]
    assert len(g_rows) == len(a_rows) == 2
    for g, a in zip(g_rows, a_rows, strict=True):
        for key in ("loss", "pg_loss", "kl_loss", "grad_norm", "reward", "entropy", "response_len"):
            assert a[key] == pytest.approx(g[key], rel=1e-6, abs=1e-9), key
        assert "aepo/hard/n_he" in a and "aepo/hard/kl_nonwindow" in a  # what the arm exists to log
    for name, tensor in g_w.items():
        torch.testing.assert_close(a_w[name], tensor, rtol=0, atol=0)


def test_paec_with_zero_coefficients_trains_exactly_like_grpo(tiny_model_dir, tmp_path):
    """The long PAEC study's baseline is PAEC with alpha = lambda_ent = 0: GRPO's updates, with H_bar and
    H_low logged on the same footing as PAEC's."""
    _, arms = _study()
    long_spec = yaml.safe_load((ROOT / "studies/paec-long.yaml").read_text())
    base = yaml.safe_load((ROOT / long_spec["arms"]["grpo"]).read_text())["rl"]
    assert base["algo"] == "paec" and base["paec"]["alpha"] == 0.0 and base["paec"]["lambda_ent"] == 0.0
    runs = {}
    for name, sets in (
        ("grpo", ("algo=grpo",)),
        ("paec0", ("algo=paec", "paec.alpha=0", "paec.lambda_ent=0")),
    ):
        out = tmp_path / name
        _train(_cfg(*sets), tiny_model_dir, out)
        from safetensors.torch import load_file

        runs[name] = (
            _rows(out / "metrics.jsonl"),
            load_file(str(next((out / "model").glob("*.safetensors")))),
        )
    (g_rows, g_w), (p_rows, p_w) = runs["grpo"], runs["paec0"]
    for g, p in zip(g_rows, p_rows, strict=True):
        for key in ("pg_loss", "kl_loss", "grad_norm", "reward", "entropy"):
            assert p[key] == pytest.approx(g[key], rel=1e-6, abs=1e-9), key
        assert p["paec/h_bar_step"] > 0
    for name, tensor in g_w.items():
        torch.testing.assert_close(p_w[name], tensor, rtol=0, atol=0)
