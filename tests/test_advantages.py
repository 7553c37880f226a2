"""Advantage estimators against hand-computed values and a plain loop; the Registry contract."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from ares_cli.algorithms.advantages import ADVANTAGES, compute_advantages
from ares_cli.algorithms.registry import Registry
from ares_cli.errors import UsageError


def loop_reference(rewards, groups, kind, eps=1e-6, std="unbiased"):
    rs = [float(r) for r in rewards]
    out = [0.0] * len(rs)
    members = {}
    for i, g in enumerate(groups):
        members.setdefault(int(g), []).append(i)
    sd = statistics.stdev if std == "unbiased" else statistics.pstdev
    centred = [0.0] * len(rs)
    for idx in members.values():
        vals = [rs[i] for i in idx]
        mu = sum(vals) / len(vals)
        s = sd(vals) if len(vals) > 1 else 0.0
        for i in idx:
            centred[i] = rs[i] - mu
            if kind == "grpo":
                out[i] = 0.0 if len(vals) < 2 else (rs[i] - mu) / (s + eps)
            elif kind == "drgrpo":
                out[i] = rs[i] - mu
    if kind == "group_mean_centred_std":
        b = sd(centred)
        out = [c / (b + eps) for c in centred]
    return out


def test_grpo_hand_computed():
    # group (1, 0, 0, 1): mean 0.5, unbiased std sqrt(1/3) -> +-0.5 / (0.57735 + 1e-6)
    adv, m = compute_advantages("grpo", torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=4)
    expect = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert adv.tolist() == pytest.approx([expect, -expect, -expect, expect], rel=1e-6)
    adv_b, _ = compute_advantages("grpo", torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=4, std="biased")
    assert adv_b[0].item() == pytest.approx(0.5 / (0.5 + 1e-6), rel=1e-6)
    assert m["zero_variance_group_frac"] == 0.0


def test_drgrpo_and_group_mean_centred_std_hand_computed():
    r = torch.tensor([1.0, 0.0, 3.0, 3.0])
    adv, m = compute_advantages("drgrpo", r, group_size=2)
    assert adv.tolist() == [0.5, -0.5, 0.0, 0.0]
    assert m["zero_variance_group_frac"] == 0.5
    bn, _ = compute_advantages("group_mean_centred_std", r, group_size=2)
    s = statistics.stdev([0.5, -0.5, 0.0, 0.0])
    assert bn.tolist() == pytest.approx([0.5 / (s + 1e-6), -0.5 / (s + 1e-6), 0.0, 0.0], rel=1e-6)


@pytest.mark.parametrize("kind", ["grpo", "drgrpo", "group_mean_centred_std"])
@pytest.mark.parametrize("std", ["unbiased", "biased"])
def test_matches_plain_loop_with_unordered_groups(kind, std):
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 3, (40,), generator=g).float() * 0.5
    groups = torch.randint(100, 110, (40,), generator=g)  # non-contiguous labels, uneven sizes
    adv, m = compute_advantages(kind, rewards, group_ids=groups, std=std)
    assert adv.tolist() == pytest.approx(loop_reference(rewards, groups, kind, std=std), abs=1e-5)
    n_zero = sum(1 for gid in groups.unique() if len(set(rewards[groups == gid].tolist())) == 1)
    assert m["zero_variance_group_frac"] == pytest.approx(n_zero / groups.unique().numel())


def test_identical_rewards_give_zero_advantage_and_singletons():
    adv, m = compute_advantages(
        "grpo", torch.tensor([1.0, 1.0, 1.0, 0.0]), group_ids=torch.tensor([0, 0, 0, 1])
    )
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert m["zero_variance_group_frac"] == 1.0 and m["num_groups"] == 2.0


def test_input_errors():
    with pytest.raises(UsageError):
        compute_advantages("grpo", torch.ones(5), group_size=2)
    with pytest.raises(UsageError):
        compute_advantages("grpo", torch.ones(4))
    with pytest.raises(UsageError):
        compute_advantages("grpo", torch.ones(4), group_size=2, std="weird")
    with pytest.raises(
        UsageError, match="drgrpo, group_mean_batch_std, group_mean_centred_std, grpo, reinforce_pp_baseline"
    ):
        compute_advantages("nope", torch.ones(4), group_size=2)


def test_registry_contract():
    reg = Registry("widget")

    @reg.register("a")
    def a():
        return 1

    assert reg.get("a") is a and "a" in reg and reg.names() == ["a"] and len(reg) == 1
    with pytest.raises(ValueError, match="duplicate"):
        reg.register("a")(lambda: 2)
    with pytest.raises(UsageError, match="unknown widget 'b'; valid: a"):
        reg.get("b")
    assert set(ADVANTAGES.names()) == {
        "grpo",
        "drgrpo",
        "group_mean_batch_std",
        "group_mean_centred_std",
        "reinforce_pp_baseline",
    }


@pytest.mark.parametrize("kind", ["grpo", "drgrpo", "group_mean_batch_std", "group_mean_centred_std"])
def test_all_equal_non_dyadic_groups_get_exactly_zero(kind):
    """Group statistics in float64: 8 rewards of 0.7 (or 0.9) have no float32 residue that a tiny std would
    blow up into a spurious advantage (float32 leaves 0.056 for every member, verl's loop's value)."""
    rewards = torch.tensor([0.7] * 8 + [0.9] * 8 + [1.0, 0.0] * 4)
    adv, m = compute_advantages(kind, rewards, group_size=8)
    assert adv[:16].abs().max().item() == 0.0 and m["zero_variance_group_frac"] == pytest.approx(2 / 3)
