"""Where the reference code is the reference (verl's core_algos, TRL's GRPOTrainer): Clip-Cov's candidate set
and its missing dual clip, the KL estimators' clamps, the batch-level advantage readings, and masking by
select. Every expected value below is computed by hand from the formulas in the docstrings."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from ares_cli.algorithms.advantages import compute_advantages
from ares_cli.algorithms.aggregation import AGGREGATION_MODES, Aggregation, masked_mean
from ares_cli.algorithms.kl import kl_estimate, kl_loss
from ares_cli.algorithms.policy_losses import LossExtras, PolicyLossConfig, policy_loss
from ares_cli.errors import UsageError


def _pair(ratios, base=-2.0):
    old = torch.full((len(ratios), len(ratios[0])), base, dtype=torch.float64)
    lp = (old + torch.tensor(ratios, dtype=torch.float64).log()).requires_grad_(True)
    return lp, old


# ---- Clip-Cov --------------------------------------------------------------------------------------------
def test_clip_cov_candidates_are_tokens_whose_clipped_branch_is_inactive():
    # logp fixed, old = logp - log r; A = +1 on row 0, -1 on row 1 (mean A = 0), mean logp = -2, so
    # cov = A (logp + 2): row 0: 1, -1, 1; row 1: -1, 1, 1. In the band (0.5, 5):
    # (0,0) r 0.5, A>0: -A r = -0.5 > -A clip(r) = -0.8, clipped branch inactive -> candidate
    # (0,2) r 1.5, A>0: -1.5 < -1.2, clipped branch active -> excluded
    # (1,1) r 1.5, A<0: 1.5 > 1.2, clipped branch inactive -> candidate
    # (1,2) r 0.5, A<0: 0.5 < 0.8, clipped branch active -> excluded
    ratios = [[0.5, 1.0, 1.5], [1.0, 1.5, 0.5]]
    lp = torch.tensor([[-1.0, -3.0, -1.0], [-1.0, -3.0, -3.0]], dtype=torch.float64, requires_grad=True)
    old = lp.detach() - torch.tensor(ratios, dtype=torch.float64).log()
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, 3)
    cfg = PolicyLossConfig(dual_clip=None, clip_cov_ratio=1.0, clip_cov_lb=0.5, clip_cov_ub=5.0)
    out, m = policy_loss("clip_cov", lp, old, adv, mask, config=cfg, aggregation=None,
                         extras=LossExtras(generator=torch.Generator().manual_seed(0)))  # fmt: skip
    assert out.flatten().tolist() == pytest.approx([0.0, -1.0, -1.2, 1.0, 0.0, 0.8], abs=1e-9)
    out.sum().backward()
    # d(-A r)/dlogp = -A r on unclipped kept tokens; 0 on clipped and on detached ones
    assert lp.grad.flatten().tolist() == pytest.approx([0.0, -1.0, 0.0, 1.0, 0.0, 0.0], abs=1e-9)
    assert m["clip_cov_frac"] == pytest.approx(2 / 6)


def test_clip_cov_recipe_has_no_dual_clip():
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.registry import build_algorithm

    cfg = resolve_rl_config(sets=["algo=clip_cov"])
    assert cfg.loss.dual_clip is None
    pl = build_algorithm(cfg, lambda t: t).policy_loss_config()
    lp, old = _pair([[5.0]])
    out, _ = policy_loss("clip_cov", lp, old, torch.tensor([-1.0], dtype=torch.float64), torch.ones(1, 1),
                         config=pl, aggregation=None, extras=LossExtras(generator=torch.Generator()))  # fmt: skip
    assert out.item() == pytest.approx(5.0)  # max(-A r, -A clip(r)) = max(5, 1.2); the dual clip would give 3
    assert resolve_rl_config(sets=["algo=grpo"]).loss.dual_clip == 3.0  # PPO keeps it


# ---- KL estimators ---------------------------------------------------------------------------------------
def test_only_k3_is_clamped():
    lp = torch.tensor([[0.0, 0.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[5.0, -15.0, 100.0]])  # d = ref - logp
    k1 = kl_estimate(lp, ref, kind="k1")
    assert k1[0].tolist() == pytest.approx([-5.0, 15.0, -100.0])  # -d, no clamp
    k2 = kl_estimate(lp, ref, kind="k2")
    assert k2[0].tolist() == pytest.approx([12.5, 112.5, 5000.0])  # d^2 / 2, no clamp
    k2.sum().backward()
    assert lp.grad[0].tolist() == pytest.approx([-5.0, 15.0, -100.0])  # d(d^2/2)/dlogp = -d: never zero
    k3 = kl_estimate(lp, ref, kind="k3")
    # exp(5) - 5 - 1 = 142.4 -> 10 ; exp(-15) + 15 - 1 = 14.0 -> 10 ; d clamped to 20 first -> 10
    assert k3[0].tolist() == pytest.approx([10.0, 10.0, 10.0])
    inside = kl_estimate(torch.zeros(1, 1), torch.tensor([[1.0]]), kind="k3")
    assert inside.item() == pytest.approx(math.e - 2.0)


# ---- batch-level advantages -------------------------------------------------------------------------------
R = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])  # two groups of four
CENTRED = [0.75, -0.25, -0.25, -0.25, 0.25, 0.25, -0.75, 0.25]  # r - group mean (0.25, 0.75)


def test_group_mean_batch_std_is_trl_scale_rewards_batch():
    adv, m = compute_advantages("group_mean_batch_std", R, group_size=4, eps=1e-4)
    std_raw = math.sqrt(sum((x - 0.5) ** 2 for x in R.tolist()) / 7)  # torch.std of the raw rewards
    assert adv.tolist() == pytest.approx([c / (std_raw + 1e-4) for c in CENTRED], rel=1e-6)
    assert m["batch_std"] == pytest.approx(math.sqrt(2 / 7))


def test_group_mean_centred_std_is_the_std_of_the_centred_rewards():
    adv, _ = compute_advantages("group_mean_centred_std", R, group_size=4)
    std_c = math.sqrt(sum(c * c for c in CENTRED) / 7)  # mean of the centred values is 0
    assert adv.tolist() == pytest.approx([c / (std_c + 1e-6) for c in CENTRED], rel=1e-6)


def test_reinforce_pp_baseline_whitens_per_token():
    lengths = torch.tensor([1, 2, 3, 4, 1, 1, 1, 1])
    adv, _ = compute_advantages("reinforce_pp_baseline", R, group_size=4, lengths=lengths, eps=1e-8)
    n = 14  # tokens
    mu = sum(L * c for L, c in zip(lengths.tolist(), CENTRED, strict=True)) / n  # = -1.5 / 14
    var = sum(L * (c - mu) ** 2 for L, c in zip(lengths.tolist(), CENTRED, strict=True)) / (n - 1)
    assert mu == pytest.approx(-1.5 / 14)
    assert adv.tolist() == pytest.approx([(c - mu) / math.sqrt(var + 1e-8) for c in CENTRED], rel=1e-6)
    with pytest.raises(UsageError, match="lengths"):
        compute_advantages("reinforce_pp_baseline", R, group_size=4)


class ThreadAllReduce:
    """An all-reduce (sum) between ``n`` threads standing in for ranks."""

    def __init__(self, n: int):
        self.barrier, self.slots = threading.Barrier(n), [None] * n

    def rank(self, r: int):
        def reduce(t):
            self.slots[r] = t.clone()
            self.barrier.wait()
            total = sum(self.slots[1:], self.slots[0].clone())
            self.barrier.wait()
            return total

        return reduce


@pytest.mark.parametrize("name", ["group_mean_batch_std", "group_mean_centred_std", "reinforce_pp_baseline"])
def test_batch_statistics_are_global_over_ranks(name):
    """Two ranks holding one group each give the advantages one rank holding both gives."""
    lengths = torch.tensor([1, 2, 3, 4, 1, 1, 1, 1])
    whole, _ = compute_advantages(name, R, group_size=4, lengths=lengths)
    comm, out = ThreadAllReduce(2), [None, None]

    def run(r):
        part = slice(4 * r, 4 * r + 4)
        out[r] = compute_advantages(name, R[part], group_size=4, lengths=lengths[part], reduce=comm.rank(r))[
            0
        ]

    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert torch.cat(out).tolist() == pytest.approx(whole.tolist(), rel=1e-6)
    local, _ = compute_advantages(name, R[:4], group_size=4, lengths=lengths[:4])
    assert local.tolist() != pytest.approx(whole[:4].tolist(), rel=1e-3)  # a rank-local std would differ


def test_batch_norm_name_is_gone():
    with pytest.raises(UsageError, match="group_mean_batch_std"):
        compute_advantages("batch_norm", R, group_size=4)


# ---- masking by select ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_non_finite_values_under_the_mask_do_not_reach_the_loss(bad, mode):
    per_token = torch.tensor([[1.0, 2.0, bad], [3.0, bad, bad]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    agg = Aggregation.from_mask(mode, mask, max_length=3)
    clean = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    assert agg(per_token, mask).item() == pytest.approx(agg(clean, mask).item())
    agg(per_token, mask).backward()
    assert torch.isfinite(per_token.grad).all() and per_token.grad[mask == 0].abs().sum() == 0
    assert masked_mean(per_token.detach(), mask).item() == pytest.approx(2.0)


def test_non_finite_logprobs_under_the_mask_do_not_reach_policy_or_kl_loss():
    lp = torch.tensor([[-1.0, -2.0, float("nan")], [-1.5, float("-inf"), float("nan")]], requires_grad=True)
    old = torch.tensor([[-1.0, -2.0, 0.0], [-1.5, 0.0, float("nan")]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    agg = Aggregation.from_mask("token_mean", mask)
    for name in ("ppo", "cispo", "kl_cov"):
        loss, metrics = policy_loss(name, lp, old, torch.tensor([1.0, -1.0]), mask, config=PolicyLossConfig(),
                                    aggregation=agg)  # fmt: skip
        # r = 1 on every valid token: ppo/kl_cov -A r -> (-1 - 1 + 1) / 3 ; cispo -A logp -> (1 + 2 - 1.5) / 3
        expect = {"ppo": -1 / 3, "kl_cov": -1 / 3, "cispo": 0.5}[name]
        assert loss.item() == pytest.approx(expect), name
        assert math.isfinite(metrics["approx_kl_k1"]) and math.isfinite(metrics["ratio_mean"]), name
    ref = torch.tensor([[-1.0, -2.5, float("nan")], [-1.5, float("nan"), 0.0]])
    kl, km = kl_loss(lp, ref, mask, aggregation=agg, kind="k3")
    assert kl.item() == pytest.approx((math.exp(-0.5) + 0.5 - 1) / 3)
    assert math.isfinite(km["kl_k3"])
