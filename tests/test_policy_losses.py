"""Policy losses: hand-computed values, gradients and a plain-loop reference."""

from __future__ import annotations

import math

import pytest
import torch

from ares_cli.algorithms.loss_aggregation import Aggregation
from ares_cli.algorithms.policy_losses import (
    POLICY_LOSSES,
    LossExtras,
    PolicyLossConfig,
    covariance,
    policy_loss,
    top_entropy_mask,
)
from ares_cli.errors import UsageError

# the hand-computed values below use clip-higher 0.28 and the Clip/KL-Cov paper's 7B constants
CFG = PolicyLossConfig(clip_high=0.28, cispo_eps_high=0.28, kl_cov_ratio=2e-3, kl_cov_coef=1.0)


def lp_pair(ratios, base=-1.0):
    old = torch.full((1, len(ratios)), base)
    lp = (old + torch.tensor([ratios]).log()).requires_grad_(True)
    return lp, old


def test_registry_names():
    assert POLICY_LOSSES.names() == ["cispo", "clip_cov", "gspo", "gspo_token", "kl_cov", "ppo"]


def test_ppo_hand_computed_clip_higher_and_dual_clip():
    lp, old = lp_pair([1.5, 0.5, 5.0, 1.1, 1.25])
    adv = torch.tensor([[1.0, -1.0, -1.0, 2.0, 1.0]])
    mask = torch.ones(1, 5)
    per_tok, m = policy_loss("ppo", lp, old, adv, mask, config=CFG, aggregation=None)
    # 1.5, A=+1: clip at 1.28 -> -1.28 ; 0.5, A=-1: max(0.5, 0.8) = 0.8 ; 5, A=-1: max(5, 1.28) = 5 -> dual 3
    # 1.1, A=2: -2.2 ; 1.25, A=1: inside clip-higher (<1.28) -> -1.25
    assert per_tok[0].tolist() == pytest.approx([-1.28, 0.8, 3.0, -2.2, -1.25], abs=1e-5)
    per_tok.sum().backward()
    # d/dlogp (-A r) = -A r where unclipped, 0 where clipped
    assert lp.grad[0].tolist() == pytest.approx([0.0, 0.0, 0.0, -2.2, -1.25], abs=1e-5)
    assert m["clipfrac_high"] == pytest.approx(0.2) and m["clipfrac_low"] == pytest.approx(0.2)
    assert m["dual_clipfrac"] == pytest.approx(0.2)
    no_dual, _ = policy_loss(
        "ppo", lp, old, adv, mask, config=PolicyLossConfig(dual_clip=None), aggregation=None
    )
    assert no_dual[0, 2].item() == pytest.approx(5.0, abs=1e-5)


def test_ppo_matches_plain_loop_and_aggregates():
    g = torch.Generator().manual_seed(0)
    old = torch.randn(4, 6, generator=g) - 2
    lp = old + torch.randn(4, 6, generator=g) * 0.4
    adv = torch.randn(4, generator=g)
    mask = (torch.rand(4, 6, generator=g) > 0.2).float()
    per_tok, _ = policy_loss("ppo", lp, old, adv, mask, config=CFG, aggregation=None)
    for i in range(4):
        for t in range(6):
            r = math.exp(lp[i, t] - old[i, t])
            a = float(adv[i])
            v = max(-a * r, -a * min(max(r, 0.8), 1.28))
            if a < 0:
                v = min(v, -3 * a)
            assert per_tok[i, t].item() == pytest.approx(v * float(mask[i, t]), abs=1e-5)
    agg = Aggregation.from_mask("token_mean", mask)
    loss, m = policy_loss("ppo", lp, old, adv, mask, config=CFG, aggregation=agg)
    assert loss.item() == pytest.approx(float(per_tok.sum() / mask.sum()), abs=1e-6)
    assert m["loss"] == pytest.approx(loss.item())
    assert m["approx_kl_k1"] == pytest.approx(float(((old - lp) * mask).sum() / mask.sum()), abs=1e-6)


def test_token_level_advantages_and_weights():
    lp, old = lp_pair([1.0, 1.0, 1.0])
    adv = torch.tensor([[1.0, -2.0, 0.5]])  # [N, T] advantage, e.g. A_i + psi_{i,t}
    w = torch.tensor([[1.0, 0.5, 0.0]])
    per_tok, _ = policy_loss(
        "ppo",
        lp,
        old,
        adv,
        torch.ones(1, 3),
        config=CFG,
        aggregation=None,
        extras=LossExtras(token_weights=w),
    )
    assert per_tok[0].tolist() == pytest.approx([-1.0, 1.0, 0.0], abs=1e-6)


@pytest.mark.parametrize("eps_low,grads", [(None, [-1.28, -0.5, -2.0]), (0.2, [-1.28, -0.8, -2.0])])
def test_cispo_one_and_two_sided(eps_low, grads):
    lp, old = lp_pair([1.5, 0.5, 1.0])
    adv = torch.tensor([1.0])
    cfg = PolicyLossConfig(cispo_eps_low=eps_low, cispo_eps_high=0.28)
    per_tok, m = policy_loss(
        "cispo", lp, old, torch.tensor([[1.0, 1.0, 2.0]]), torch.ones(1, 3), config=cfg, aggregation=None
    )
    # loss = -sg(clip(r)) A logp ; d/dlogp = -clip(r) A (the clipped tokens still get gradient)
    clipped = [1.28, 0.5 if eps_low is None else 0.8, 1.0]
    assert per_tok[0].tolist() == pytest.approx(
        [-c * a * float(x) for c, a, x in zip(clipped, [1, 1, 2], lp[0].detach(), strict=True)], abs=1e-5
    )
    per_tok.sum().backward()
    assert lp.grad[0].tolist() == pytest.approx(grads, abs=1e-5)
    assert m["cispo_clipfrac_high"] == pytest.approx(1 / 3)
    del adv


def test_covariance_and_clip_cov_selection():
    lp = torch.tensor([[-1.0, -2.0, -3.0, -4.0], [-1.0, -1.0, -5.0, 0.0]])
    adv = torch.tensor([[2.0], [-2.0]]).expand(2, 4)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    cov = covariance(adv, lp, mask)
    # mean A over 7 valid = 2/7 ; mean logp = -17/7
    ma, ml = 2 / 7, -17 / 7
    assert cov[0, 0].item() == pytest.approx((2 - ma) * (-1 - ml), abs=1e-6)
    assert cov[1, 2].item() == pytest.approx((-2 - ma) * (-5 - ml), abs=1e-6)
    assert cov[1, 3].item() == float("-inf")

    g = torch.Generator().manual_seed(0)
    n, t = 8, 50
    old = torch.randn(n, t, generator=g) - 2
    lp = (old + torch.randn(n, t, generator=g) * 0.05).requires_grad_(True)
    adv = torch.randn(n, generator=g) * 3
    mask = torch.ones(n, t)
    cfg = PolicyLossConfig(clip_cov_ratio=0.02, clip_cov_lb=0.5, clip_cov_ub=5.0)

    def run(seed):
        x = lp.detach().clone().requires_grad_(True)
        out, m = policy_loss(
            "clip_cov",
            x,
            old,
            adv,
            mask,
            config=cfg,
            aggregation=None,
            extras=LossExtras(generator=torch.Generator().manual_seed(seed)),
        )
        out.sum().backward()
        return x.grad, m, out

    g1, m1, out1 = run(1)
    g1b, _, _ = run(1)
    assert torch.equal(g1, g1b)  # seeded: same tokens dropped
    dropped = g1 == 0
    assert int(dropped.sum()) == int(0.02 * n * t) == 8 and m1["clip_cov_frac"] == pytest.approx(0.02)
    c = covariance(adv.unsqueeze(-1).expand(n, t), lp, mask)
    assert ((c[dropped] > 0.5) & (c[dropped] < 5.0)).all()
    assert (out1[dropped] == 0).all()
    g2, _, _ = run(2)
    assert not torch.equal(g1 == 0, g2 == 0)
    with pytest.raises(UsageError):
        policy_loss("clip_cov", lp, old, adv, mask, config=cfg, aggregation=None)


def test_kl_cov_hand_computed():
    old = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    lp = torch.tensor([[-0.5, -1.2, -3.0, -1.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, -1.0, 0.0]])
    cfg = PolicyLossConfig(kl_cov_ratio=0.25, kl_cov_coef=2.0)
    per_tok, m = policy_loss("kl_cov", lp, old, adv, torch.ones(1, 4), config=cfg, aggregation=None)
    # mean A = 0.25, mean logp = -1.425; cov = (0.75)(0.925), (0.75)(0.225), (-1.25)(-1.575)=1.96875, 0
    # top 1 token = index 2: -A r + 2 |logp - old| = e^-2 + 2 * 2
    r = [math.exp(0.5), math.exp(-0.2), math.exp(-2.0), 1.0]
    expect = [-r[0], -r[1], r[2] + 4.0, 0.0]
    assert per_tok[0].tolist() == pytest.approx(expect, abs=1e-5)
    per_tok.sum().backward()
    assert lp.grad[0].tolist() == pytest.approx([-r[0], -r[1], r[2] - 2.0, 0.0], abs=1e-5)
    assert m["kl_cov_frac"] == 0.25


@pytest.mark.parametrize("name", ["clip_cov", "kl_cov"])
def test_default_ratio_still_selects_one_token(name):
    """max(1, floor(2e-4 n)): with the PAEC baselines' ratio a 12-token batch still has one token selected."""
    old = torch.full((2, 6), -1.0)
    lp = old + torch.tensor([[0.1, -0.1, 0.05, 0.0, 0.02, -0.03], [0.0, 0.1, -0.2, 0.1, 0.0, 0.0]])
    adv = torch.tensor([3.0, -3.0])
    extras = LossExtras(generator=torch.Generator().manual_seed(0))
    cfg = PolicyLossConfig(clip_cov_lb=-100.0, clip_cov_ub=100.0)  # every token in the band
    _, m = policy_loss(name, lp, old, adv, torch.ones(2, 6), config=cfg, aggregation=None, extras=extras)
    assert m[f"{name}_frac"] == pytest.approx(1 / 12)


def test_top_entropy_quantile_interpolates():
    """The quantile rule's threshold interpolates between the order statistics (TRL's torch.quantile): with
    5 values and frac 0.3 the 0.7-quantile lies between the 3rd and 4th, so the top 2 are kept, not 3."""
    ent = torch.tensor([[0.1, 0.5, 0.2, 0.4, 0.3]])
    keep = top_entropy_mask(ent, torch.ones(1, 5), 0.3, "quantile")
    assert keep[0].tolist() == [False, True, False, True, False]
    assert keep[0].tolist() == (ent[0] >= torch.quantile(ent[0], 0.7)).tolist()


def test_top_entropy_mask_8020():
    ent = torch.arange(10.0).view(1, 10)
    mask = torch.ones(1, 10)
    keep = top_entropy_mask(ent, mask, 0.2)
    assert keep[0].tolist() == [False] * 8 + [True, True]
    mask2 = mask.clone()
    mask2[0, 9] = 0  # padding never counted: 9 valid -> ceil(1.8) = 2 kept -> 7, 8
    assert top_entropy_mask(ent, mask2, 0.2)[0].nonzero().view(-1).tolist() == [7, 8]

    lp, old = lp_pair([1.0] * 10)
    cfg = PolicyLossConfig(top_entropy_frac=0.2)
    loss, m = policy_loss(
        "ppo",
        lp,
        old,
        torch.tensor([1.0]),
        mask,
        config=cfg,
        aggregation=Aggregation.from_mask("token_mean", mask),
        extras=LossExtras(entropy=ent),
    )
    loss.backward()
    assert lp.grad[0].tolist() == pytest.approx([0.0] * 8 + [-0.1, -0.1])
    assert m["top_entropy_keep_frac"] == pytest.approx(0.2)
    with pytest.raises(UsageError):
        policy_loss("ppo", lp, old, torch.tensor([1.0]), mask, config=cfg, aggregation=None)


def test_global_entropy_bonus():
    lp, old = lp_pair([1.0, 1.0, 1.0])
    ent = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0]])
    cfg = PolicyLossConfig(entropy_coef=0.01)
    loss, m = policy_loss(
        "ppo",
        lp,
        old,
        torch.tensor([0.0]),
        mask,
        config=cfg,
        aggregation=Aggregation.from_mask("token_mean", mask),
        extras=LossExtras(entropy=ent),
    )
    assert loss.item() == pytest.approx(-0.01 * 1.5)
    loss.backward()
    assert ent.grad[0].tolist() == pytest.approx([-0.005, -0.005, 0.0])
    assert m["entropy"] == pytest.approx(1.5)


def test_config_validation():
    with pytest.raises(UsageError):
        PolicyLossConfig(dual_clip=0.5)
    with pytest.raises(UsageError):
        PolicyLossConfig(top_entropy_frac=0.0)
    with pytest.raises(UsageError, match="valid: "):
        policy_loss("nope", None, None, None, None, config=CFG, aggregation=None)
