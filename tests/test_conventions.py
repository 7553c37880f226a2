"""docs/methods.md's conventions table: every row whose peer value a key reproduces, checked through the config
path the trainer uses (``--set`` keys -> RLConfig -> the algorithm's loss constants / the step's advantages)
on a fixed input, against the peer's formula evaluated by hand. Each test also checks that the default
gives ``ares``'s own value, so the key is what makes the difference."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ares_cli.algorithms.aggregation import Aggregation
from ares_cli.algorithms.kl import kl_loss
from ares_cli.algorithms.policy_losses import LossExtras, policy_loss

METHODS = Path(__file__).resolve().parents[1] / "docs" / "methods.md"

# row -> the keys that reproduce the peer (each must appear in the table)
KEYS = {
    "adv_eps_trl": ["loss.adv_eps=1e-4"],
    "batch_std_trl": ["loss.advantage=group_mean_batch_std", "loss.adv_eps=1e-4"],
    "whitening_verl": ["loss.advantage=reinforce_pp_baseline", "loss.adv_eps=1e-8"],
    "cispo_cap_trl": ["algo=cispo", "loss.cispo_eps_high=4"],
    "log_ratio_trl": ["loss.log_ratio_clamp=null", "loss.dual_clip=null"],
    "dual_clip_trl_delta": ["loss.dual_clip=2.5"],
    "k3_clamps_trl": ["kl.clamp=null", "kl.log_ratio_clamp=null"],
    "top_entropy_trl": ["algo=topent", "loss.top_entropy_frac=0.3", "loss.top_entropy_rule=quantile"],
    "entropy_mean_trl": ["algo=entropy", "loss.entropy_aggregation=token_mean"],
}


def _cfg(*sets):
    from ares_cli.training.rl.config import resolve_rl_config

    return resolve_rl_config(sets=list(sets))


def _loss_cfg(cfg):
    from ares_cli.training.rl.registry import build_algorithm

    return build_algorithm(cfg, lambda t: t).policy_loss_config()


def _advantages(cfg, rewards, lengths, group_size):
    from ares_cli.training.rl.rewards import step_advantages

    n, width = len(rewards), max(lengths)
    mask = torch.tensor([[1.0] * L + [0.0] * (width - L) for L in lengths])
    batch = SimpleNamespace(group=torch.arange(n) // group_size, response_mask=mask)
    return step_advantages(cfg, torch.tensor(rewards), batch, lambda t: t)[0].tolist()


def test_every_key_is_in_the_table():
    text = METHODS.read_text(encoding="utf-8")
    table = text[text.index("## Conventions") :]
    for row, keys in KEYS.items():
        for key in keys:
            assert f"`{key}`" in table, (row, key)


def test_advantage_eps_trl():
    r = [1.0, 0.0, 0.0]  # mean 1/3, unbiased std sqrt(1/3)
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    trl = [(x - 1 / 3) / (std + 1e-4) for x in r]
    assert _advantages(_cfg(*KEYS["adv_eps_trl"]), r, [1, 1, 1], 3) == pytest.approx(trl, rel=1e-6)
    assert _advantages(_cfg(), r, [1, 1, 1], 3) == pytest.approx(
        [(x - 1 / 3) / (std + 1e-6) for x in r], rel=1e-6
    )


def test_batch_std_trl():
    r = [1.0, 0.0, 1.0, 1.0]  # groups (1, 0), (1, 1): centred 0.5, -0.5, 0, 0; raw mean 0.75
    std_raw = math.sqrt((3 * 0.25**2 + 0.75**2) / 3)
    trl = [c / (std_raw + 1e-4) for c in (0.5, -0.5, 0.0, 0.0)]
    assert _advantages(_cfg(*KEYS["batch_std_trl"]), r, [1] * 4, 2) == pytest.approx(trl, rel=1e-6)


def test_token_whitening_verl():
    r, lengths = [1.0, 0.0, 1.0, 1.0], [3, 1, 2, 2]
    c = [0.5, -0.5, 0.0, 0.0]
    mu = sum(L * x for L, x in zip(lengths, c, strict=True)) / 8  # 1 / 8
    var = sum(L * (x - mu) ** 2 for L, x in zip(lengths, c, strict=True)) / 7
    verl = [(x - mu) / math.sqrt(var + 1e-8) for x in c]
    assert _advantages(_cfg(*KEYS["whitening_verl"]), r, lengths, 2) == pytest.approx(verl, rel=1e-6)


def _pair(ratios, dtype=torch.float64):
    old = torch.full((1, len(ratios)), -1.0, dtype=dtype)
    return (old + torch.tensor([ratios], dtype=dtype).log()).requires_grad_(True), old


def test_cispo_cap_trl():
    # TRL: -sg(min(r, eps_high)) A logp with epsilon_high = 5; ares caps at 1 + cispo_eps_high
    lp, old = _pair([4.5, 5.5, 8.0])
    mask, adv = torch.ones(1, 3), torch.tensor([1.0], dtype=torch.float64)
    trl = [-min(r, 5.0) * float(x) for r, x in zip([4.5, 5.5, 8.0], lp[0].detach(), strict=True)]
    got, _ = policy_loss(
        "cispo", lp, old, adv, mask, config=_loss_cfg(_cfg(*KEYS["cispo_cap_trl"])), aggregation=None
    )
    assert got[0].tolist() == pytest.approx(trl, rel=1e-9)
    default, _ = policy_loss(
        "cispo", lp, old, adv, mask, config=_loss_cfg(_cfg("algo=cispo")), aggregation=None
    )
    assert default[0, 1].item() == pytest.approx(-5.5 * float(lp[0, 1].detach()))  # cap 6: 5.5 passes


def test_no_log_ratio_clamp_trl():
    # A < 0, log r = 25: TRL -min(r A, clip(r) A) = |A| e^25 (no clamp, delta unset); ares default clamps the
    # log-ratio at 20 and dual-clips at 3
    old = torch.zeros(1, 1, dtype=torch.float64)
    lp = torch.full((1, 1), 25.0, dtype=torch.float64)
    adv = torch.tensor([-1.0], dtype=torch.float64)
    got, _ = policy_loss("ppo", lp, old, adv, torch.ones(1, 1), config=_loss_cfg(_cfg(*KEYS["log_ratio_trl"])),
                         aggregation=None)  # fmt: skip
    assert got.item() == pytest.approx(math.exp(25.0), rel=1e-12)
    nodual = _loss_cfg(_cfg("loss.dual_clip=null"))
    assert policy_loss("ppo", lp, old, adv, torch.ones(1, 1), config=nodual, aggregation=None)[0].item() == (
        pytest.approx(math.exp(20.0), rel=1e-12)
    )
    assert (
        policy_loss("ppo", lp, old, adv, torch.ones(1, 1), config=_loss_cfg(_cfg()), aggregation=None)[
            0
        ].item()
        == 3.0
    )


def test_dual_clip_is_trl_delta():
    # TRL with delta: coef_1 = min(r, delta); -min(coef_1 A, clip(r) A). A = -1, r = 4 -> min(4, 2.5) = 2.5;
    # A = +1, r = 4 -> -min(2.5, 1.2) = -1.2; A = -1, r = 0.5 -> max(0.5, 0.8) = 0.8
    lp, old = _pair([4.0, 4.0, 0.5])
    adv = torch.tensor([[-1.0, 1.0, -1.0]], dtype=torch.float64)
    got, _ = policy_loss("ppo", lp, old, adv, torch.ones(1, 3), config=_loss_cfg(_cfg(*KEYS["dual_clip_trl_delta"])),
                         aggregation=None)  # fmt: skip
    assert got[0].tolist() == pytest.approx([2.5, -1.2, 0.8], rel=1e-12)


def test_k3_without_clamps_trl():
    lp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[3.0, 0.5]], dtype=torch.float64)  # d = ref - logp
    mask = torch.ones(1, 2)
    agg = Aggregation.from_mask("token_mean", mask)
    trl = ((math.exp(3) - 3 - 1) + (math.exp(0.5) - 0.5 - 1)) / 2  # 16.09 is not cut at 10
    kl = _cfg(*KEYS["k3_clamps_trl"]).kl
    got, _ = kl_loss(
        lp, ref, mask, aggregation=agg, kind="k3", clamp=kl.clamp, log_ratio_clamp=kl.log_ratio_clamp
    )
    assert got.item() == pytest.approx(trl, rel=1e-12)
    d = _cfg().kl
    default, _ = kl_loss(
        lp, ref, mask, aggregation=agg, kind="k3", clamp=d.clamp, log_ratio_clamp=d.log_ratio_clamp
    )
    assert default.item() == pytest.approx((10.0 + math.exp(0.5) - 1.5) / 2, rel=1e-12)


def test_top_entropy_quantile_trl():
    # n = 4 distinct entropies, frac 0.3: TRL threshold = quantile(0.7) = x_2 + 0.1 (x_3 - x_2) -> keeps 1 token;
    # ceil(0.3 * 4) = 2 under the default rule
    ent = torch.tensor([[0.1, 0.4, 0.2, 0.3]])
    lp, old = _pair([1.0] * 4, dtype=torch.float32)
    mask = torch.ones(1, 4)

    def kept(cfg):
        x = lp.detach().clone().requires_grad_(True)
        loss, _ = policy_loss(
            "ppo",
            x,
            old,
            torch.tensor([1.0]),
            mask,
            config=_loss_cfg(cfg),
            aggregation=Aggregation.from_mask("token_mean", mask),
            extras=LossExtras(entropy=ent),
        )
        loss.backward()
        return (x.grad[0] != 0).tolist()

    assert kept(_cfg(*KEYS["top_entropy_trl"])) == [False, True, False, False]
    assert kept(_cfg("algo=topent", "loss.top_entropy_frac=0.3")) == [False, True, False, True]


def test_entropy_bonus_token_mean_trl():
    # seq_mean_token_mean loss, rows of 1 and 3 tokens with entropies 2 | 1, 1, 1 and zero advantages:
    # TRL -coef * token mean = -coef * 5/4; verl / ares default -coef * mean of row means = -coef * 3/2
    lp, old = _pair([1.0] * 3, dtype=torch.float32)
    lp = lp.detach().expand(2, 3).clone().requires_grad_(True)
    old = old.expand(2, 3)
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    ent = torch.tensor([[2.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    agg = Aggregation.from_mask("seq_mean_token_mean", mask)

    def bonus(cfg):
        pl = _loss_cfg(cfg)
        loss, _ = policy_loss("ppo", lp, old, torch.zeros(2), mask, config=pl, aggregation=agg,
                              extras=LossExtras(entropy=ent))  # fmt: skip
        return loss.item(), pl.entropy_coef

    got, coef = bonus(_cfg(*KEYS["entropy_mean_trl"]))
    assert got == pytest.approx(-coef * 5 / 4)
    default, coef = bonus(_cfg("algo=entropy"))
    assert default == pytest.approx(-coef * 3 / 2)
