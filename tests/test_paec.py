"""PAEC (position-aware entropy calibration), eq. 5-15 and appendix A.2, against hand-computed values."""

import math

import pytest
import torch

from ares_cli.algorithms.controllers import EntropyAnchor
from ares_cli.algorithms.paec import (
    PAECConfig,
    lower_bound_penalty,
    masked_entropy,
    paec_loss,
    position_scores,
    position_scores_from_stats,
    scores_from_stats,
    soft_mask,
)
from ares_cli.algorithms.token_stats import token_stats
from ares_cli.errors import UsageError


def _logits(*rows):
    return torch.log(torch.tensor(rows, dtype=torch.float64))


def test_eq5_to_eq9_scores_from_logits():
    logits = _logits([[0.5, 0.3, 0.15, 0.05], [0.9, 0.05, 0.03, 0.02]])
    ps = position_scores(logits, top_p=0.85, beta=0.3)
    # row 0: nucleus {0.5, 0.3, 0.15} (0.8 < 0.85 <= 0.95), renormalised by 0.95
    q = torch.tensor([0.5, 0.3, 0.15], dtype=torch.float64) / 0.95
    h = -(q * q.log()).sum().item()
    s1 = h / (math.log(3) + 1e-6)
    s2 = 2 / (1 + 0.5 / 0.3)  # 2 sigma(-log(0.5/0.3)) = 0.75
    assert ps.nucleus_size[0].tolist() == [3, 1]
    assert ps.local_entropy[0, 0].item() == pytest.approx(h)
    assert ps.s1[0, 0].item() == pytest.approx(s1) and ps.s2[0, 0].item() == pytest.approx(0.75)
    assert ps.score[0, 0].item() == pytest.approx(s1 + 0.3 * s2)
    # row 1: one-token nucleus (0.9 >= 0.85): H' = 0, s1 = 0/eps = 0, no second candidate -> s2 = 0
    assert (ps.local_entropy[0, 1].item(), ps.s1[0, 1].item(), ps.s2[0, 1].item()) == (0.0, 0.0, 0.0)
    assert ps.score[0, 1].item() == 0.0


def test_eq7_eq8_scores_from_precomputed_stats():
    ps = scores_from_stats(
        torch.tensor([[math.log(2), 0.0]]), torch.tensor([[2, 1]]), torch.tensor([[0.0, 3.0]]), beta=0.3
    )
    assert ps.s1[0, 0].item() == pytest.approx(math.log(2) / (math.log(2) + 1e-6))
    assert ps.s2.tolist() == [[1.0, 0.0]]  # tie: 2 sigma(0) = 1; one-token nucleus: 0
    assert ps.score[0, 0].item() == pytest.approx(ps.s1[0, 0].item() + 0.3)


def test_scores_reuse_token_stats_pass():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 50, generator=g)
    stats = token_stats(logits, torch.zeros(2, 5, dtype=torch.long))
    a, b = position_scores(logits), position_scores_from_stats(stats)
    assert torch.equal(a.score, b.score) and torch.equal(a.local_entropy, b.local_entropy)


def test_eq10_soft_mask_per_response_quantile():
    score = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0], [0.7, 9.0, 9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    m = soft_mask(score, mask, quantile=0.8, sharpness=12.0)
    # row 0: tau = 3 + 0.2 * 1 = 3.2; row 1 has one token: tau = its score, m = sigma(0); padding 0
    expect = [1 / (1 + math.exp(-12 * (s - 3.2))) for s in range(5)]
    assert m[0].tolist() == pytest.approx(expect)
    assert m[1].tolist() == [0.5, 0.0, 0.0, 0.0, 0.0]
    assert soft_mask(score, torch.zeros_like(mask)).abs().sum() == 0


def test_eq11_masked_entropy_and_eq13_penalty():
    h = torch.tensor([[1.0, 2.0, 3.0]])
    m = torch.tensor([[1.0, 0.5, 0.9]])
    mask = torch.tensor([[1, 1, 0]])
    assert masked_entropy(h, m, mask, eps=0.0).item() == pytest.approx((1 + 1) / 1.5)
    assert lower_bound_penalty(torch.tensor(0.6), 1.0).item() == pytest.approx(0.16)
    assert lower_bound_penalty(torch.tensor(1.2), 1.0).item() == 0.0
    assert lower_bound_penalty(torch.tensor(0.2), None).item() == 0.0


def test_eq15_paec_loss_value_and_metrics():
    cfg = PAECConfig()
    h = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    m = torch.tensor([[1.0, 0.5, 0.0]])
    out = paec_loss(h, m, torch.ones(1, 3), cfg, h0=2.0, nucleus_size=torch.tensor([[1, 3, 5]]))
    h_bar = 2.0 / (1.5 + 1e-6)
    pen = (0.8 * 2.0 - h_bar) ** 2  # H_low = rho_min H0 = 1.6
    assert out.loss.item() == pytest.approx(-8e-4 * h_bar + 0.004 * pen)
    assert out.metrics["paec/h_low"] == pytest.approx(1.6) and out.metrics["paec/penalty"] == pytest.approx(
        pen
    )
    assert out.metrics["paec/mask_mean"] == pytest.approx(0.5) and out.metrics["paec/nucleus_size"] == 3
    out.loss.backward()
    # d/dH'_i = (-alpha - 2 lambda (H_low - H_bar)) m_i / Z
    coef = (-8e-4 - 2 * 0.004 * (1.6 - h_bar)) / 1.5
    assert h.grad.tolist()[0] == pytest.approx([coef, 0.5 * coef, 0.0], rel=1e-5)
    no_anchor = paec_loss(h, m, torch.ones(1, 3), cfg, h0=None)
    assert no_anchor.penalty == 0.0 and math.isnan(no_anchor.metrics["paec/h0"])


def _reference_nucleus_entropy(logits, p):
    probs = logits.softmax(-1)
    srt, _ = probs.sort(-1, descending=True)
    cum = srt.cumsum(-1)
    keep = (cum - srt) < p  # smallest prefix whose mass reaches p
    q = srt * keep
    q = q / q.sum(-1, keepdim=True)
    return -(q * q.clamp_min(1e-300).log()).sum(-1)


def test_appendix_a2_score_and_mask_carry_no_gradient():
    g = torch.Generator().manual_seed(3)
    logits = (2 * torch.randn(3, 6, 40, generator=g, dtype=torch.float64)).requires_grad_()
    mask = (torch.arange(6)[None] < torch.tensor([[6], [4], [1]])).long()
    ps = position_scores(logits)
    assert ps.local_entropy.requires_grad
    assert not (ps.score.requires_grad or ps.s1.requires_grad or ps.s2.requires_grad)
    m = soft_mask(ps.score, mask)
    assert not m.requires_grad
    (grad,) = torch.autograd.grad(masked_entropy(ps.local_entropy, m, mask), logits)
    # expected: (1/Z) sum_i m_i dH'_i with m held constant (no path through s or tau)
    ref_h = _reference_nucleus_entropy(logits, 0.85)
    assert torch.allclose(ref_h, ps.local_entropy.detach().double(), atol=1e-5)  # token_stats is float32
    w = m * mask
    (ref,) = torch.autograd.grad((w * ref_h).sum() / (w.sum() + 1e-6), logits)
    assert torch.allclose(grad, ref, atol=1e-6) and grad.abs().sum() > 0


def test_split_micro_batches_and_ranks_sum_to_full_gradient():
    cfg = PAECConfig()
    g = torch.Generator().manual_seed(4)
    h = torch.rand(4, 5, generator=g, dtype=torch.float64).requires_grad_()
    m = torch.rand(4, 5, generator=g, dtype=torch.float64)
    mask = torch.ones(4, 5)
    full = paec_loss(h, m, mask, cfg, h0=5.0)
    (g_full,) = torch.autograd.grad(full.loss, h)
    num, den = float((m * h).detach().sum()), float(m.sum())
    parts = [paec_loss(h[i : i + 2], m[i : i + 2], mask[i : i + 2], cfg, h0=5.0, global_num=num, global_den=den)
             for i in (0, 2)]  # fmt: skip
    assert all(p.h_bar == pytest.approx(full.h_bar) for p in parts)
    (g_split,) = torch.autograd.grad(sum(p.loss for p in parts), h)
    assert torch.allclose(g_split, g_full)


def test_anchor_then_loss_flow():
    cfg = PAECConfig(anchor_steps=4, rho_min=0.8)
    anchor = EntropyAnchor(cfg.anchor_steps)
    for v in (1.0, 1.2, 0.8, 1.0):
        anchor.update(v, 1.0)
    assert anchor.h0 == pytest.approx(1.0, rel=1e-5) and anchor.frozen
    h = torch.full((1, 2), 0.5)
    out = paec_loss(h, torch.ones(1, 2), torch.ones(1, 2), cfg, h0=anchor.h0)
    assert (
        out.penalty == pytest.approx((0.8 - 0.5) ** 2, rel=1e-4) and out.metrics["paec/penalty_active"] == 1
    )


def test_config_defaults_are_the_papers():
    cfg = PAECConfig()
    assert (cfg.top_p, cfg.top_k, cfg.beta, cfg.quantile, cfg.sharpness) == (0.85, 10000, 0.3, 0.8, 12.0)
    assert (cfg.alpha, cfg.lambda_ent, cfg.anchor_steps) == (8e-4, 0.004, 4)
    with pytest.raises(UsageError):
        PAECConfig(rho_min=1.0)


def test_eq10_eq11_garbage_at_padding_never_leaks():
    score = torch.tensor([[1.0, 2.0, float("nan")]])
    mask = torch.tensor([[1, 1, 0]])
    m = soft_mask(score, mask, quantile=0.5)
    assert m[0, 2].item() == 0.0 and m[0, 0].item() == pytest.approx(1 / (1 + math.exp(6)))
    h = torch.tensor([[1.0, 1.0, float("nan")]])
    assert masked_entropy(h, m, mask, eps=0.0).item() == pytest.approx(1.0)
