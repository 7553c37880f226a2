"""docs/methods.md's conventions table: every row whose peer value a key reproduces, checked through the config
path the trainer uses (``--set`` keys -> RLConfig -> the algorithm's loss constants / the step's advantages /
the trainer's loss call) on a fixed input, against the peer's formula evaluated by hand. Each test also checks
that the default gives ``ares``'s own value, so the key is what makes the difference. ``tests/mutants.py``
checks that a wrong implementation of any of these conventions fails a test here or beside."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ares_cli.algorithms.kl import kl_loss
from ares_cli.algorithms.loss_aggregation import Aggregation
from ares_cli.algorithms.policy_losses import LossExtras, policy_loss

METHODS = Path(__file__).resolve().parents[1] / "docs" / "methods.md"

# row -> the keys that reproduce the peer (each must appear in the table)
KEYS = {
    "adv_eps_trl": ["loss.adv_eps=1e-4"],
    "batch_std_trl": ["loss.advantage=group_mean_batch_std", "loss.adv_eps=1e-4"],
    "whitening_verl": ["loss.advantage=reinforce_pp_baseline", "loss.adv_eps=1e-8"],
    "cispo_cap_trl": ["algo=cispo", "loss.cispo_eps_low=null", "loss.cispo_eps_high=4"],
    "cispo_minimax": ["algo=cispo", "loss.cispo_eps_low=null"],
    "log_ratio_trl": ["loss.log_ratio_clamp=null", "loss.dual_clip=null"],
    "dual_clip_trl_delta": ["loss.dual_clip=2.5"],
    "k3_clamps_trl": ["kl.clamp=null", "kl.log_ratio_clamp=null"],
    "top_entropy_trl": ["algo=topent", "loss.top_entropy_frac=0.3", "loss.top_entropy_rule=quantile"],
    "entropy_mean_trl": ["algo=entropy", "loss.entropy_aggregation=token_mean"],
    "entropy_scope_trl": ["algo=topent", "loss.top_entropy_rule=quantile", "loss.entropy_coef=0.01",
                          "loss.entropy_aggregation=token_mean", "loss.entropy_scope=kept"],
    "gspo_token_mean_trl": ["algo=gspo", "loss.aggregation=token_mean"],
}  # fmt: skip


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
    return step_advantages(cfg.loss, torch.tensor(rewards), batch, lambda t: t)[0].tolist()


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
    # default grpo: each group's own std, (1, 0) -> +-0.5 / (sqrt(0.5) + 1e-6), (1, 1) -> 0
    own = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert _advantages(_cfg(), r, [1] * 4, 2) == pytest.approx([own, -own, 0.0, 0.0], rel=1e-6)


def test_token_whitening_verl():
    r, lengths = [1.0, 0.0, 1.0, 1.0], [3, 1, 2, 2]
    c = [0.5, -0.5, 0.0, 0.0]
    mu = sum(L * x for L, x in zip(lengths, c, strict=True)) / 8  # 1 / 8
    var = sum(L * (x - mu) ** 2 for L, x in zip(lengths, c, strict=True)) / 7
    verl = [(x - mu) / math.sqrt(var + 1e-8) for x in c]
    assert _advantages(_cfg(*KEYS["whitening_verl"]), r, lengths, 2) == pytest.approx(verl, rel=1e-6)
    own = 0.5 / (math.sqrt(0.5) + 1e-6)  # default grpo: no whitening, no token weighting
    assert _advantages(_cfg(), r, lengths, 2) == pytest.approx([own, -own, 0.0, 0.0], rel=1e-6)
    # epsilon inside the root: with eps = 0.25 (sigma ~ 0.35) sqrt(var + eps) and sigma + eps differ by 20 %
    big = [(x - mu) / math.sqrt(var + 0.25) for x in c]
    got = _advantages(_cfg("loss.advantage=reinforce_pp_baseline", "loss.adv_eps=0.25"), r, lengths, 2)
    assert got == pytest.approx(big, rel=1e-6)


def _pair(ratios, dtype=torch.float64):
    old = torch.full((1, len(ratios)), -1.0, dtype=dtype)
    return (old + torch.tensor([ratios], dtype=dtype).log()).requires_grad_(True), old


def test_cispo_cap_trl():
    # TRL: -sg(min(r, eps_high)) A logp with epsilon_high = 5, no lower bound; ares caps at 1 + cispo_eps_high
    # and, by default, bounds below at 1 (PAEC's baseline in verl)
    ratios = [0.5, 4.5, 5.5, 8.0]
    lp, old = _pair(ratios)
    mask, adv = torch.ones(1, 4), torch.tensor([1.0], dtype=torch.float64)
    x = lp[0].detach().tolist()
    trl = [-min(r, 5.0) * v for r, v in zip(ratios, x, strict=True)]
    got, _ = policy_loss(
        "cispo", lp, old, adv, mask, config=_loss_cfg(_cfg(*KEYS["cispo_cap_trl"])), aggregation=None
    )
    assert got[0].tolist() == pytest.approx(trl, rel=1e-9)
    minimax, _ = policy_loss("cispo", lp, old, adv, mask, config=_loss_cfg(_cfg(*KEYS["cispo_minimax"])),
                             aggregation=None)  # fmt: skip
    assert minimax[0].tolist() == pytest.approx([-min(r, 6.0) * v for r, v in zip(ratios, x, strict=True)])
    default, _ = policy_loss(
        "cispo", lp, old, adv, mask, config=_loss_cfg(_cfg("algo=cispo")), aggregation=None
    )
    verl = [-min(max(r, 1.0), 6.0) * v for r, v in zip(ratios, x, strict=True)]  # the weight in [1, 6]
    assert default[0].tolist() == pytest.approx(verl, rel=1e-9)


def _huge_log_ratio_losses(cfg):
    """Every loss at log r = 25 on its one token with A = +1 (A = -1 for the clipped ones): the per-token loss
    shows whether the log-ratio was clamped at 20 before exp."""
    old = torch.zeros(1, 1, dtype=torch.float64)
    lp = torch.full((1, 1), 25.0, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    out = {}
    for name, a in (("ppo", -1.0), ("clip_cov", -1.0), ("cispo", 1.0), ("kl_cov", 1.0), ("gspo", -1.0)):
        loss, metrics = policy_loss(name, lp, old, torch.tensor([a], dtype=torch.float64), torch.ones(1, 1),
                                    config=_loss_cfg(cfg), aggregation=None, extras=LossExtras(generator=g))  # fmt: skip
        out[name] = (loss.item(), metrics["ratio_max"])
    return out


@pytest.mark.parametrize("name", ["ppo", "clip_cov", "cispo", "kl_cov", "gspo"])
def test_every_loss_clamps_the_log_ratio(name):
    """``loss.log_ratio_clamp`` (verl's 20) reaches every loss; null (TRL) lets e^25 through."""
    keys = ["loss.dual_clip=null"] if name in ("ppo", "clip_cov", "gspo") else []
    clamped = _huge_log_ratio_losses(_cfg(f"loss.policy_loss={name}", *keys))[name]
    free = _huge_log_ratio_losses(_cfg(f"loss.policy_loss={name}", *keys, "loss.log_ratio_clamp=null"))[name]
    assert clamped[1] == pytest.approx(math.exp(20.0), rel=1e-12) and free[1] == pytest.approx(math.exp(25.0))
    if name == "cispo":  # the weight is capped at 6 either way (the clamp shows in the ratio metrics only)
        assert clamped[0] == free[0] == pytest.approx(-6.0 * 25.0)
    elif name == "kl_cov":  # -A r + 0.1 |log r| on its one (top-covariance) token; |log r| unclamped (verl)
        assert clamped[0] == pytest.approx(-math.exp(20.0) + 0.1 * 25.0, rel=1e-12)
        assert free[0] == pytest.approx(-math.exp(25.0) + 0.1 * 25.0, rel=1e-12)
    else:  # A = -1: max(r, clip(r)) = r
        assert clamped[0] == pytest.approx(math.exp(20.0), rel=1e-12)
        assert free[0] == pytest.approx(math.exp(25.0), rel=1e-12)


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
    default, _ = policy_loss(
        "ppo", lp, old, adv, torch.ones(1, 3), config=_loss_cfg(_cfg()), aggregation=None
    )
    assert default[0].tolist() == pytest.approx([3.0, -1.2, 0.8], rel=1e-12)  # ares: c = 3


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
    # d = 25: kl.clamp=null alone still clamps d at 20 before exp (verl's log-ratio clamp)
    far = torch.full((1, 1), 25.0, dtype=torch.float64)
    one = torch.ones(1, 1)
    k = _cfg("kl.clamp=null").kl
    got, _ = kl_loss(torch.zeros(1, 1, dtype=torch.float64), far, one, aggregation=Aggregation.from_mask("token_mean", one),
                     kind="k3", clamp=k.clamp, log_ratio_clamp=k.log_ratio_clamp)  # fmt: skip
    assert got.item() == pytest.approx(math.exp(20.0) - 21.0, rel=1e-12)


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


def test_entropy_bonus_scope_trl():
    # TRL with top_entropy_quantile q < 1 keeps the tokens with H >= quantile(H, 1 - q) for the policy term
    # AND the bonus: loss = sum(pg keep) / N_tok - coef * sum(H keep) / sum(keep). ares's default puts the
    # bonus on every valid token.
    ent = torch.tensor([[0.9, 0.1, 0.5, 0.3, 0.0], [0.7, 0.2, 0.8, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0]])
    lp, old = _pair([1.0] * 5, dtype=torch.float32)
    lp, old = lp.detach().expand(2, 5).clone().requires_grad_(True), old.expand(2, 5)
    adv = torch.tensor([1.0, -0.5])
    agg = Aggregation.from_mask("token_mean", mask)
    valid = ent[mask.bool()]
    keep = (ent >= torch.quantile(valid, 1 - 0.2)) & mask.bool()  # 7 tokens, q 0.2: 1 + floor(1.2) = 2 kept
    assert int(keep.sum()) == 2
    pg = -adv[:, None].expand(2, 5) * keep  # r = 1: -min(r A, clip(r) A) = -A on the kept tokens
    trl = float(pg.sum() / mask.sum() - 0.01 * (ent * keep).sum() / keep.sum())

    def total(cfg):
        loss, _ = policy_loss("ppo", lp, old, adv, mask, config=_loss_cfg(cfg), aggregation=agg,
                              extras=LossExtras(entropy=ent))  # fmt: skip
        return loss.item()

    assert total(_cfg(*KEYS["entropy_scope_trl"])) == pytest.approx(trl, rel=1e-6)
    everywhere = float(pg.sum() / mask.sum() - 0.01 * valid.mean())
    assert total(_cfg(*KEYS["entropy_scope_trl"][:-1])) == pytest.approx(everywhere, rel=1e-6)


def test_gspo_token_mean_trl():
    # TRL importance_sampling_level="sequence": log w_i = sum_t m (lp - old) / |y_i| on every token of row i,
    # -min(w A, clip(w, 1 - 3e-4, 1 + 4e-4) A); loss_type "dapo"/"bnpo" divide the sum by N_tok, "grpo" takes
    # the mean of the rows' token means (the preset's seq_mean_token_mean)
    old = torch.tensor([[-1.0, -2.0, -1.5], [-0.5, -1.0, -1.0]], dtype=torch.float64)
    lp = old + torch.tensor([[0.002, -0.001, 0.004], [0.003, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    m = mask.double()
    w = (((lp - old) * m).sum(-1) / m.sum(-1)).exp()[:, None].expand(2, 3)
    a = adv[:, None].expand(2, 3)
    per_token = -torch.minimum(w * a, w.clamp(1 - 3e-4, 1 + 4e-4) * a) * m
    dapo = float(per_token.sum() / m.sum())
    grpo = float((per_token.sum(-1) / m.sum(-1)).mean())
    assert dapo != pytest.approx(grpo, rel=1e-3)

    def total(cfg):
        agg = Aggregation.from_mask(cfg.loss.aggregation, mask)
        return policy_loss("gspo", lp, old, adv, mask, config=_loss_cfg(cfg), aggregation=agg)[0].item()

    assert total(_cfg(*KEYS["gspo_token_mean_trl"])) == pytest.approx(dapo, rel=1e-9)
    assert total(_cfg("algo=gspo")) == pytest.approx(grpo, rel=1e-9)


def _trainer_loss(cfg, *, lp, ref, entropy=None, kl_weight=None):
    """The trainer's own loss call (``update._micro_loss``) on one micro-batch with zero advantages, so the
    policy term is 0 and what is left is the KL term and the entropy bonus as the trainer configures them."""
    from ares_cli.training.rl.batch import SequenceValues, TokenValues
    from ares_cli.training.rl.registry import build_algorithm
    from ares_cli.training.rl.update import _micro_loss

    mask = torch.ones_like(lp)
    algo = build_algorithm(cfg, lambda t: t)
    tok = TokenValues(old_logprob=lp.detach(), advantages=torch.zeros(lp.shape[0], dtype=lp.dtype),
                      ref_logprob=ref, kl_weight=kl_weight)  # fmt: skip
    micro = SimpleNamespace(response_mask=mask, tok=tok, seq=SequenceValues())
    stats = SimpleNamespace(logprob=lp, entropy=torch.zeros_like(lp) if entropy is None else entropy)
    agg = Aggregation.from_mask("token_mean", mask)
    loss, _ = _micro_loss(
        stats, micro, algo, cfg, agg, algo.policy_loss_config(), torch.Generator().manual_seed(0)
    )
    return loss.item()


def test_the_trainer_passes_the_kl_settings():
    lp = torch.zeros(1, 2, dtype=torch.float64)
    ref = torch.tensor([[25.0, 0.5]], dtype=torch.float64)  # d = ref - logp
    k3 = [math.expm1(25.0) - 25.0, math.expm1(0.5) - 0.5]
    assert _trainer_loss(_cfg("kl.coef=1", *KEYS["k3_clamps_trl"]), lp=lp, ref=ref) == pytest.approx(
        sum(k3) / 2
    )
    assert _trainer_loss(_cfg("kl.coef=1", "kl.clamp=null"), lp=lp, ref=ref) == pytest.approx(
        (math.expm1(20.0) - 20.0 + k3[1]) / 2
    )
    assert _trainer_loss(_cfg("kl.coef=1"), lp=lp, ref=ref) == pytest.approx((10.0 + k3[1]) / 2)
    assert _trainer_loss(_cfg("kl.coef=1", "kl.estimator=k2"), lp=lp, ref=ref) == pytest.approx(
        (312.5 + 0.125) / 2
    )
    weights = torch.tensor([[0.0, 2.0]], dtype=torch.float64)
    assert _trainer_loss(_cfg("kl.coef=1"), lp=lp, ref=ref, kl_weight=weights) == pytest.approx(k3[1])
    entropy = torch.tensor([[1.0, 3.0]], dtype=torch.float64)
    got = _trainer_loss(_cfg("algo=entropy", "kl.coef=0.5"), lp=lp, ref=lp.detach(), entropy=entropy)
    assert got == pytest.approx(-8e-4 * 2.0)  # no KL (ref = logp), the bonus -coef * mean H


def test_singleton_groups_verl():
    # verl gives a group of one mean 0 and std 1: grpo A = r / (1 + eps), drgrpo A = r, REINFORCE++-baseline
    # centres nothing; ares (singleton="zero") centres it on itself. TRL refuses G < 2.
    from ares_cli.algorithms.advantages import compute_advantages

    r, groups = torch.tensor([1.0, 0.0, 0.7]), torch.tensor([0, 0, 1])
    grpo, _ = compute_advantages("grpo", r, group_ids=groups, singleton="verl")
    pair = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert grpo.tolist() == pytest.approx([pair, -pair, 0.7 / (1 + 1e-6)], rel=1e-6)
    assert compute_advantages("grpo", r, group_ids=groups)[0].tolist() == pytest.approx([pair, -pair, 0.0])
    assert compute_advantages("drgrpo", r, group_ids=groups, singleton="verl")[0].tolist() == pytest.approx(
        [0.5, -0.5, 0.7]
    )
    lengths = torch.tensor([2, 1, 3])
    c = [0.5, -0.5, 0.7]
    mu = sum(L * x for L, x in zip(lengths.tolist(), c, strict=True)) / 6
    var = sum(L * (x - mu) ** 2 for L, x in zip(lengths.tolist(), c, strict=True)) / 5
    got, _ = compute_advantages("reinforce_pp_baseline", r, group_ids=groups, lengths=lengths, eps=1e-8,
                                singleton="verl")  # fmt: skip
    assert got.tolist() == pytest.approx([(x - mu) / math.sqrt(var + 1e-8) for x in c], rel=1e-6)
