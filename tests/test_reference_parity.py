"""Where the reference code is the reference (verl's core_algos, TRL's GRPOTrainer): Clip-Cov's candidate set
and its missing dual clip, CISPO as PAEC's baseline ran it in verl, the KL estimators' clamps, the batch-level
advantage readings, and masking by select (loss and gradient). Every expected value below is computed by hand
from the formulas in the docstrings, or from the reference's formula re-implemented here."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from ares_cli.algorithms.advantages import compute_advantages
from ares_cli.algorithms.kl import kl_estimate, kl_loss
from ares_cli.algorithms.loss_aggregation import AGGREGATION_MODES, Aggregation, masked_mean
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


# ---- CISPO: PAEC's baseline as verl runs it -------------------------------------------------------------
def verl_cispo(old, lp, adv, mask, clip_ratio_low, clip_ratio_high):
    """verl's ``compute_policy_loss_cispo`` formula, re-implemented: the log-ratio clamped to +-20, the weight
    clamp(r, 1 - clip_ratio_low, 1 + clip_ratio_high), detached, times -A log pi, token-mean."""
    ratio = (lp - old).clamp(-20.0, 20.0).exp()
    weight = ratio.clamp(1 - clip_ratio_low, 1 + clip_ratio_high).detach()
    per_token = -weight * adv * lp
    return (per_token * mask).sum() / mask.sum(), per_token


def _cispo_inputs(seed=0, n=16, t=24):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, t, generator=g) * 4 - 0.05  # log-probs in (-4.05, -0.05)
    lp = old + torch.randn(n, t, generator=g) * 0.6  # ratios from about 0.1 to 10
    adv = torch.randn(n, 1, generator=g).expand(n, t)
    mask = (torch.rand(n, t, generator=g) > 0.2).float()
    return old, lp, adv, mask


@pytest.mark.parametrize("seed", range(5))
def test_cispo_default_is_verl_with_paec_settings(seed):
    """PAEC app. B: eps_low = 0, eps_high = 5, run in verl -> weights clipped to [1, 6]: ``--algo cispo``'s
    default equals verl's formula to float32 rounding; MiniMax-M1's reading (no lower bound) does not."""
    from ares_cli.training.rl.config import resolve_rl_config

    old, lp, adv, mask = _cispo_inputs(seed)
    agg = Aggregation.from_mask("token_mean", mask)
    ref, ref_tok = verl_cispo(old, lp, adv, mask, 0.0, 5.0)
    x = lp.clone().requires_grad_(True)
    got, _ = policy_loss("cispo", x, old, adv, mask, config=resolve_rl_config(sets=["algo=cispo"]).loss,
                         aggregation=agg)  # fmt: skip
    assert abs(got.item() - ref.item()) <= 1e-7
    got.backward()
    y = lp.clone().requires_grad_(True)
    verl_cispo(old, y, adv, mask, 0.0, 5.0)[0].backward()
    assert (x.grad - y.grad).abs().max().item() <= 1e-7
    minimax, _ = policy_loss("cispo", lp, old, adv, mask, aggregation=agg, config=resolve_rl_config(
        sets=["algo=cispo", "loss.cispo_eps_low=null"]).loss)  # fmt: skip
    assert abs(minimax.item() - ref.item()) > 1e-3  # the readings differ wherever r < 1 carries weight
    assert float((ref_tok * mask).abs().sum()) > 0


# ---- a NaN at a padded position reaches no gradient ------------------------------------------------------
def _poisoned(shape=(2, 4)):
    """Inputs whose padded positions hold NaN / inf (a backend's fill value), and their mask."""
    g = torch.Generator().manual_seed(3)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    pad = ~mask.bool()

    def poison(x, value):
        return torch.where(pad, torch.full_like(x, value), x)

    old = -torch.rand(shape, generator=g, dtype=torch.float64) - 0.1
    lp = poison(old + torch.randn(shape, generator=g, dtype=torch.float64) * 0.3, float("nan"))
    return {"lp": lp, "old": poison(old, float("-inf")), "ref": poison(old, float("nan")), "mask": mask,
            "adv": poison(torch.randn(shape, generator=g, dtype=torch.float64), float("nan")),
            "entropy": poison(torch.rand(shape, generator=g, dtype=torch.float64), float("inf")),
            "weights": poison(torch.rand(shape, generator=g, dtype=torch.float64), float("nan"))}  # fmt: skip


CASES = [(name, extra) for name in ("ppo", "cispo", "clip_cov", "kl_cov", "gspo_token")
         for extra in ("plain", "entropy_bonus", "token_weights", "per_token")]  # fmt: skip


@pytest.mark.parametrize("name,extra", CASES)
def test_nan_under_the_mask_reaches_no_policy_gradient(name, extra):
    d = _poisoned()
    lp = d["lp"].clone().requires_grad_(True)
    ent = d["entropy"].clone().requires_grad_(True)
    extras = LossExtras(generator=torch.Generator().manual_seed(0))
    cfg = PolicyLossConfig(clip_cov_ratio=0.5)
    if extra == "entropy_bonus":
        extras.entropy, cfg = ent, PolicyLossConfig(clip_cov_ratio=0.5, entropy_coef=0.1)
    if extra == "token_weights":
        extras.token_weights = d["weights"]
    agg = None if extra == "per_token" else Aggregation.from_mask("seq_mean_token_mean", d["mask"])
    loss, _ = policy_loss(name, lp, d["old"], d["adv"], d["mask"], config=cfg, aggregation=agg, extras=extras)
    loss.sum().backward()
    pad = ~d["mask"].bool()
    assert torch.isfinite(loss).all(), (name, extra)
    assert torch.isfinite(lp.grad).all() and lp.grad[pad].abs().sum() == 0, (name, extra, lp.grad)
    if extra == "entropy_bonus":
        assert torch.isfinite(ent.grad).all() and ent.grad[pad].abs().sum() == 0


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_nan_under_the_mask_reaches_no_kl_gradient(kind):
    d = _poisoned()
    lp = d["lp"].clone().requires_grad_(True)
    loss, _ = kl_loss(lp, d["ref"], d["mask"], aggregation=Aggregation.from_mask("token_mean", d["mask"]),
                      kind=kind, weights=d["weights"])  # fmt: skip
    loss.backward()
    assert (
        torch.isfinite(loss) and torch.isfinite(lp.grad).all() and lp.grad[~d["mask"].bool()].abs().sum() == 0
    )
