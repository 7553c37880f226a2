"""KL estimators k1/k2/k3 and the weighted KL loss, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from ares_cli.algorithms.kl import kl_estimate, kl_loss
from ares_cli.algorithms.loss_aggregation import Aggregation
from ares_cli.errors import UsageError


def test_estimators_hand_computed():
    lp = torch.tensor([[math.log(0.5), math.log(0.2)]])
    ref = torch.tensor([[math.log(0.25), math.log(0.4)]])
    d = [math.log(0.5), math.log(2.0)]  # log ref - log pi
    assert kl_estimate(lp, ref, kind="k1").tolist()[0] == pytest.approx([-x for x in d], abs=1e-6)
    assert kl_estimate(lp, ref, kind="k2").tolist()[0] == pytest.approx([x * x / 2 for x in d], abs=1e-6)
    # k3 = r - log r - 1 with r = pi_ref / pi: 0.5 - ln .5 - 1 = 0.193147, 2 - ln 2 - 1 = 0.306853
    assert kl_estimate(lp, ref, kind="k3").tolist()[0] == pytest.approx([0.193147, 0.306853], abs=1e-6)
    assert kl_estimate(lp, lp, kind="k3").abs().max() == 0


def test_k3_is_unbiased_for_true_kl():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(6, generator=g), -1)
    q = torch.softmax(torch.randn(6, generator=g), -1)
    true_kl = float((p * (p / q).log()).sum())
    # exact expectation over the sampled token o ~ p
    for kind in ("k1", "k3"):
        est = kl_estimate(p.log().unsqueeze(0), q.log().unsqueeze(0), kind=kind)[0]
        assert float((p * est).sum()) == pytest.approx(true_kl, abs=1e-6)


def test_clamping():
    lp = torch.tensor([[0.0, 0.0]])
    ref = torch.tensor([[-100.0, 100.0]])
    k1 = kl_estimate(lp, ref, kind="k1")
    assert k1.tolist() == [[100.0, -100.0]]  # only k3 is clamped (as verl)
    k3 = kl_estimate(lp, ref, kind="k3")
    assert torch.isfinite(k3).all() and k3.max() == 10.0
    with pytest.raises(UsageError):
        kl_estimate(lp, ref, kind="k4")


def test_weighted_kl_loss_hand_computed_and_grad():
    lp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0, -2.0], [-0.5, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    w = torch.tensor([[0.5, 1.0, 2.0], [1.0, 0.25, 9.0]])  # beta_{i,t}
    agg = Aggregation.from_mask("token_mean", mask)
    loss, m = kl_loss(lp, ref, mask, aggregation=agg, kind="k2", coef=0.1, weights=w)
    d = [[-0.5, 0.0, 1.0], [0.0, -0.5]]
    wl = [[0.5, 1.0, 2.0], [1.0, 0.25]]
    expect = 0.1 * sum(wl[i][t] * d[i][t] ** 2 / 2 for i in range(2) for t in range(len(d[i]))) / 5
    assert loss.item() == pytest.approx(expect, abs=1e-7)
    loss.backward()
    # d/dlogp of coef * w * (ref - lp)^2 / 2 / 5 = -coef * w * (ref - lp) / 5
    g = [[-0.1 * wl[i][t] * d[i][t] / 5 for t in range(len(d[i]))] for i in range(2)]
    assert lp.grad[0].tolist() == pytest.approx(g[0], abs=1e-7)
    assert lp.grad[1, :2].tolist() == pytest.approx(g[1], abs=1e-7) and lp.grad[1, 2] == 0
    assert m["kl_k2"] == pytest.approx((0.125 + 0 + 0.5 + 0 + 0.125) / 5)
