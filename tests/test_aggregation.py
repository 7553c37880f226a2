"""Aggregation modes: hand-computed values and exact gradient equality over any micro-batch split."""

from __future__ import annotations

import pytest
import torch

from ares_cli.algorithms.loss_aggregation import AGGREGATION_MODES, Aggregation, local_counts
from ares_cli.errors import UsageError

LOSS = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 1.0, 1.0, 1.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]])


def test_hand_computed_modes():
    c = local_counts(MASK)
    assert c == {"tokens": 6.0, "sequences": 3.0}
    assert Aggregation("token_mean", 6, 3)(LOSS, MASK).item() == pytest.approx((6 + 11 + 9) / 6)
    assert Aggregation("seq_mean_token_mean", 6, 3)(LOSS, MASK).item() == pytest.approx((2 + 5.5 + 9) / 3)
    assert Aggregation("seq_sum_constant", 6, 3, max_length=8)(LOSS, MASK).item() == pytest.approx(26 / 24)
    with pytest.raises(UsageError):
        Aggregation("seq_sum_constant", 6, 3)
    with pytest.raises(UsageError):
        Aggregation("mean", 6, 3)


def loop_reference(mode, loss, mask, max_length):
    rows = [[loss[i][t] for t in range(len(loss[i])) if mask[i][t]] for i in range(len(loss))]
    rows = [r for r in rows if r]
    if mode == "token_mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    if mode == "seq_mean_token_mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    return sum(sum(r) for r in rows) / (len(rows) * max_length)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_matches_loop(mode):
    g = torch.Generator().manual_seed(0)
    loss = torch.randn(7, 9, generator=g)
    mask = (torch.rand(7, 9, generator=g) > 0.3).long()
    mask[3] = 0  # an empty sequence is not counted
    got = Aggregation.from_mask(mode, mask, max_length=9)(loss, mask).item()
    assert got == pytest.approx(loop_reference(mode, loss.tolist(), mask.tolist(), 9), abs=1e-6)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize("splits", [[10], [1] * 10, [3, 7], [2, 5, 3], [4, 4, 2]])
def test_microbatch_split_gradient_equals_full_batch(mode, splits):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(10, 12, generator=g)
    lengths = torch.randint(1, 13, (10,), generator=g)
    mask = (torch.arange(12) < lengths.unsqueeze(-1)).long()
    theta0 = torch.randn(12, generator=g)

    def per_token(theta, xs):  # a differentiable per-token loss
        return torch.tanh(xs * theta) ** 2 + xs * theta

    full = Aggregation.from_mask(mode, mask, max_length=12)
    th = theta0.clone().requires_grad_(True)
    full(per_token(th, x), mask).backward()
    g_full = th.grad.clone()

    # micro-batches: global counts = sum of each micro-batch's local counts ("all-reduce")
    parts = torch.split(torch.arange(10), splits)
    counts = [local_counts(mask[p]) for p in parts]
    agg = Aggregation(mode, sum(c["tokens"] for c in counts), sum(c["sequences"] for c in counts), 12)
    th2 = theta0.clone().requires_grad_(True)
    for p in parts:
        agg(per_token(th2, x[p]), mask[p]).backward()  # gradient accumulation
    torch.testing.assert_close(th2.grad, g_full, atol=1e-6, rtol=0)


def test_per_microbatch_normalisation_would_differ():
    # the bug the global counts prevent: normalising by local token counts changes the gradient
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    loss = torch.tensor([[1.0, 1.0, 1.0, 1.0], [3.0, 0.0, 0.0, 0.0]])
    glob = Aggregation.from_mask("token_mean", mask)
    total = glob(loss[:1], mask[:1]) + glob(loss[1:], mask[1:])
    local = (
        Aggregation.from_mask("token_mean", mask[:1])(loss[:1], mask[:1])
        + Aggregation.from_mask("token_mean", mask[1:])(loss[1:], mask[1:])
    ) / 2
    assert total.item() == pytest.approx(7 / 5) and local.item() == pytest.approx(2.0)
