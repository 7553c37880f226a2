"""GSPO and GSPO-token (Zheng et al. 2025): the sequence ratio, its clipping and the gradient through the
length-normalised ratio, by hand; the presets; a two-step toy run through the CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch

from ares_cli.algorithms.loss_aggregation import Aggregation
from ares_cli.algorithms.policy_losses import PolicyLossConfig, policy_loss
from ares_cli.errors import UsageError

# the paper's clip ranges (sec. 5.1); no dual clip
CFG = PolicyLossConfig(clip_low=3e-4, clip_high=4e-4, dual_clip=None)
# per-token ratios r_{i,t}; row 2 has one padded position
RATIOS = [[1.0001, 1.0009, 1.0], [0.9999, 1.0001, 1.0], [1.0, 1.0, 1.0003], [0.999, 0.9995, 1.0]]
LENGTHS = [2, 2, 3, 2]
ADV = [1.0, -1.0, 1.0, -1.0]


def _inputs():
    old = torch.full((4, 3), -1.5, dtype=torch.float64)
    lp = (old + torch.tensor(RATIOS, dtype=torch.float64).log()).requires_grad_(True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 0]])
    return lp, old, mask


def _s(i):  # s_i = (prod_t r_{i,t})^(1/|y_i|)  (eq. 7)
    return math.prod(RATIOS[i][: LENGTHS[i]]) ** (1 / LENGTHS[i])


def _hand():
    """Per-sequence loss and whether the clip holds it (eq. 5: -min(s A, clip(s) A))."""
    out = []
    for i, a in enumerate(ADV):
        s = _s(i)
        c = min(max(s, 1 - 3e-4), 1 + 4e-4)
        out.append((max(-a * s, -a * c), -a * c > -a * s))
    return out


def test_sequence_ratio_and_its_clipping_by_hand():
    # s_0 = sqrt(1.0001 * 1.0009) = 1.0004999 > 1 + 4e-4, A > 0: clipped at 1.0004
    # s_1 = sqrt(0.9999 * 1.0001) = 0.99999999..., inside
    # s_2 = 1.0003^(1/3) = 1.0001000, inside (the padded position does not count)
    # s_3 = sqrt(0.999 * 0.9995) = 0.999250 < 1 - 3e-4, A < 0: clipped at 0.9997
    assert _s(0) == pytest.approx(1.00049992, abs=1e-8) and _s(3) == pytest.approx(0.99924997, abs=1e-8)
    lp, old, mask = _inputs()
    per_tok, m = policy_loss("gspo", lp, old, torch.tensor(ADV, dtype=torch.float64), mask, config=CFG,
                             aggregation=None)  # fmt: skip
    hand = _hand()
    assert [h[1] for h in hand] == [True, False, False, True]
    for i, (value, _clipped) in enumerate(hand):
        assert per_tok[i, : LENGTHS[i]].tolist() == pytest.approx([value] * LENGTHS[i], abs=1e-12)
        assert per_tok[i, LENGTHS[i] :].abs().sum() == 0
    assert hand[0][0] == pytest.approx(-1.0004) and hand[3][0] == pytest.approx(0.9997)
    # token-weighted clip fractions: row 0 (2 tokens, high) and row 3 (2 tokens, low) of 9 tokens
    assert m["clipfrac_high"] == pytest.approx(2 / 9) and m["clipfrac_low"] == pytest.approx(2 / 9)
    assert m["gspo_seq_ratio_max"] == pytest.approx(_s(0))


@pytest.mark.parametrize("name", ["gspo", "gspo_token"])
def test_gradient_through_the_length_normalised_ratio(name):
    lp, old, mask = _inputs()
    agg = Aggregation.from_mask("seq_mean_token_mean", mask)
    loss, _ = policy_loss(name, lp, old, torch.tensor(ADV, dtype=torch.float64), mask, config=CFG,
                          aggregation=agg)  # fmt: skip
    hand = _hand()
    assert loss.item() == pytest.approx(sum(h[0] for h in hand) / 4, abs=1e-12)  # eq. 5: 1/G sum_i l_i
    loss.backward()
    # unclipped: d(-A s_i)/dlogp_{i,t} = -A s_i / |y_i| (eq. 10-11), times 1/G; clipped sequences get 0
    for i, (_value, clipped) in enumerate(hand):
        g = 0.0 if clipped else -ADV[i] * _s(i) / LENGTHS[i] / 4
        assert lp.grad[i, : LENGTHS[i]].tolist() == pytest.approx([g] * LENGTHS[i], abs=1e-12), (name, i)
        assert lp.grad[i, LENGTHS[i] :].abs().sum() == 0


def test_gspo_token_takes_token_level_advantages():
    lp, old, mask = _inputs()
    adv = torch.tensor(
        [[1.0, 3.0, 0.0], [-1.0, 2.0, 0.0], [1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]], dtype=torch.float64
    )
    per_tok, _ = policy_loss("gspo_token", lp, old, adv, mask, config=CFG, aggregation=None)
    per_tok.sum().backward()
    # s_{i,t} = s_i in value; token (1, 1): A = 2 > 0 with s_1 inside -> loss -2 s_1, gradient -2 s_1
    assert per_tok[1, 1].item() == pytest.approx(-2 * _s(1), abs=1e-12)
    assert lp.grad[1, 1].item() == pytest.approx(-2 * _s(1), abs=1e-12)
    # token (0, 1): A = 3 > 0 with s_0 > 1 + 4e-4 -> clipped, -3 * 1.0004, no gradient
    assert per_tok[0, 1].item() == pytest.approx(-3 * 1.0004) and lp.grad[0, 1].item() == 0.0
    with pytest.raises(UsageError, match="gspo_token"):
        policy_loss("gspo", lp, old, adv, mask, config=CFG, aggregation=None)


def test_token_mean_weighs_sequences_by_length():
    """TRL's loss_type "dapo" with importance_sampling_level="sequence": sum_i |y_i| l_i / N_tokens."""
    lp, old, mask = _inputs()
    loss, _ = policy_loss("gspo", lp, old, torch.tensor(ADV, dtype=torch.float64), mask, config=CFG,
                          aggregation=Aggregation.from_mask("token_mean", mask))  # fmt: skip
    hand = _hand()
    assert loss.item() == pytest.approx(
        sum(L * h[0] for L, h in zip(LENGTHS, hand, strict=True)) / 9, abs=1e-12
    )


def test_on_policy_gspo_is_grpo():
    """With r = 1 everywhere (the first optimiser step of a rollout batch) s_i = 1 and GSPO's gradient is the
    policy gradient -A (1/|y_i|) sum_t grad log pi, exactly GRPO's under seq-mean-token-mean."""
    lp, old, mask = _inputs()
    lp = old.clone().requires_grad_(True)
    agg = Aggregation.from_mask("seq_mean_token_mean", mask)
    adv = torch.tensor(ADV, dtype=torch.float64)
    policy_loss("gspo", lp, old, adv, mask, config=CFG, aggregation=agg)[0].backward()
    g_gspo = lp.grad.clone()
    lp.grad = None
    policy_loss("ppo", lp, old, adv, mask, config=PolicyLossConfig(), aggregation=agg)[0].backward()
    torch.testing.assert_close(g_gspo, lp.grad)


def test_presets():
    from ares_cli.training.rl.config import resolve_rl_config

    for algo, loss in (("gspo", "gspo"), ("gspo_token", "gspo_token")):
        cfg = resolve_rl_config(sets=[f"algo={algo}"])
        assert cfg.loss.policy_loss == loss and (cfg.loss.clip_low, cfg.loss.clip_high) == (3e-4, 4e-4)
        assert cfg.loss.dual_clip is None and cfg.kl.coef == 0.0
        assert cfg.loss.aggregation == "seq_mean_token_mean"
    assert resolve_rl_config(sets=["algo=gspo", "loss.clip_high=1e-3"]).loss.clip_high == 1e-3


def test_two_step_toy_run_through_the_cli(tiny_model_dir, tmp_path):
    from conftest import run_ares

    args = ("rl", "--model", str(tiny_model_dir), "--data", "toy-train", "--algo", "gspo", "--steps", "2",
            "--set", "data_limit=8", "--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=4",
            "--set", "rollout.max_new_tokens=8", "--set", "optim.mini_batch_size=1", "--set", "optim.lr=1e-2",
            "--set", "grading.workers=1", "--set", "grading.grader=tests.test_rl_graders:parity_grade",
            "--set", "save_every=0", "--trust-grader-code")  # fmt: skip
    done = run_ares(*args, process=False, root=tmp_path)
    path = done.stdout.strip()
    manifest = json.loads(open(f"{path}/manifest.json").read())
    assert manifest["stats"]["steps"] == 2 and manifest["config"]["loss"]["policy_loss"] == "gspo"
    rows = [json.loads(line) for line in open(f"{path}/metrics.jsonl").read().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        # two optimiser steps per RL step: the second mini-batch is off-policy, so s_i moves off 1
        assert r["updates"] == 2.0 and r["gspo_seq_ratio_max"] > 1.0
        assert 0.0 <= r["clipfrac_high"] <= 1.0 and math.isfinite(r["loss"])
