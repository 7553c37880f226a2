"""AEPO hierarchical reward (ARES sec. 3.2.2: λ_d, g_d, R), appendix I shaping and algorithm 1's ψ."""

import pytest
import torch

from ares_cli.algorithms.aepo import AEPOConfig
from ares_cli.algorithms.aepo_reward import (
    aepo_rewards,
    group_caps,
    hierarchical_reward,
    lagrange_multiplier,
    shaped_reward,
    shaping_direction,
    token_bonus,
)
from ares_cli.algorithms.buckets import EASY, HARD, MEDIUM
from ares_cli.algorithms.controllers import HETargetTracker
from ares_cli.errors import UsageError

D = torch.float64


def test_sec322_lambda_closed_form_paper():
    mean, target, var = (
        torch.tensor([5.0, 5, 5], dtype=D),
        torch.tensor([3.0, 7, 5], dtype=D),
        torch.tensor([1.0, 3, 0], dtype=D),
    )
    # easy (5-3)/(1+1) = 1; medium max(0, -2) = 0; hard 0 / (0+1) = 0
    assert lagrange_multiplier(mean, target, var, eps=1.0).tolist() == [1.0, 0.0, 0.0]
    # with the target equal to the batch mean (the paper as written) lambda is always 0
    assert lagrange_multiplier(mean, mean, var).tolist() == [0.0, 0.0, 0.0]


def test_sec322_lambda_directional_variant():
    mean = torch.tensor([5.0, 5, 5], dtype=D)
    target = torch.tensor([3.0, 7, 7], dtype=D)
    var = torch.tensor([1.0, 3, 0], dtype=D)
    # easy 2/2; medium |-2|/4; hard (7-5)/(0+1)
    out = lagrange_multiplier(mean, target, var, eps=1.0, mode="directional")
    assert out.tolist() == [1.0, 0.5, 2.0]
    empty = lagrange_multiplier(mean, target, var, count=torch.tensor([0.0, 4, 4]), mode="directional")
    assert empty.tolist() == [0.0, 0.5, 2.0]


def test_sec322_shaping_direction_g_d():
    delta = torch.tensor([-2.0, 3.0, -2.0, 3.0, -2.0, 3.0])
    b = torch.tensor([EASY, EASY, MEDIUM, MEDIUM, HARD, HARD])
    assert shaping_direction(delta, b).tolist() == [0.0, 3.0, 2.0, 3.0, 2.0, 0.0]


def test_sec322_reward_penalises_incorrect_only():
    r_acc = torch.tensor([1.0, 0.0, 0.0])
    correct = torch.tensor([True, False, False])
    n_he = torch.tensor([10.0, 10.0, 2.0])
    b = torch.full((3,), EASY)
    target, lam = torch.tensor([4.0, 0, 0], dtype=D), torch.tensor([0.1, 0, 0], dtype=D)
    # delta = (6, 6, -2), g_easy = (6, 6, 0), penalty 0.1 * g on the incorrect only
    out = hierarchical_reward(r_acc, correct, n_he, b, target, lam)
    assert out.tolist() == pytest.approx([1.0, -0.6, 0.0])
    capped = hierarchical_reward(r_acc, correct, n_he, b, target, lam, cap=0.5)
    assert capped.tolist() == pytest.approx([1.0, -0.5, 0.0])


def test_appendix_i_hard_rewards_exploration_for_correct_and_incorrect():
    r_acc = torch.tensor([1.0, 0.0, 0.0, 1.0])
    correct = r_acc.bool()
    n_he = torch.tensor([9.0, 9.0, 1.0, 1.0])
    b = torch.full((4,), HARD)
    target, lam = torch.tensor([0, 0, 5.0], dtype=D), torch.tensor([0, 0, 0.1], dtype=D)
    out = hierarchical_reward(r_acc, correct, n_he, b, target, lam, variant="appendix_i")
    # delta = (4, 4, -4, -4): correct +0.1*max(0, d); incorrect +0.1*d
    assert out.tolist() == pytest.approx([1.4, 0.4, -0.4, 1.0])


def test_appendix_i_easy_and_medium_and_cap():
    r_acc = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])
    correct = r_acc.bool()
    n_he = torch.tensor([8.0, 8.0, 2.0, 2.0, 8.0])
    b = torch.tensor([EASY, EASY, MEDIUM, MEDIUM, MEDIUM])
    target, lam = torch.tensor([4.0, 4.0, 0], dtype=D), torch.tensor([0.05, 0.1, 0], dtype=D)
    out = hierarchical_reward(r_acc, correct, n_he, b, target, lam, variant="appendix_i")
    # easy: -0.05*4 for both; medium correct -0.1*|-2|, incorrect -0.1*max(0, 2), incorrect over target 0
    assert out.tolist() == pytest.approx([0.8, -0.2, 0.8, -0.2, 0.0])
    big = hierarchical_reward(r_acc, correct, n_he, b, target, lam * 100, variant="appendix_i")
    # every shaping term clipped to +-min(cap, gap/2) = 0.5
    assert big.tolist() == pytest.approx([0.5, -0.5, 0.5, -0.5, 0.0])


@pytest.mark.parametrize("variant", ["paper", "appendix_i"])
def test_invariant_correct_never_below_incorrect_within_bucket(variant):
    g = torch.Generator().manual_seed(1)
    for trial in range(300):
        n = int(torch.randint(2, 40, (1,), generator=g))
        correct = torch.rand(n, generator=g) < 0.5
        fmt = 0.05 * (torch.rand(n, generator=g) < 0.5)  # a format bonus on top of accuracy
        r_acc = correct.float() + fmt
        n_he = torch.randint(0, 200, (n,), generator=g).float()
        b = torch.randint(0, 3, (n,), generator=g)
        target = torch.rand(3, generator=g, dtype=D) * 200
        lam = torch.rand(3, generator=g, dtype=D) * (10.0 ** float(torch.randint(-3, 4, (1,), generator=g)))
        cap = float(torch.rand(1, generator=g)) * 3
        out = hierarchical_reward(r_acc, correct, n_he, b, target, lam, variant=variant, cap=cap)
        for d in range(3):
            c, i = correct & (b == d), ~correct & (b == d)
            if c.any() and i.any():
                assert out[c].min() >= out[i].max() - 1e-6, (trial, d)


def test_aepo_rewards_with_lagging_ema_target():
    cfg = AEPOConfig()
    tracker = HETargetTracker("ema", decay=0.9)
    b = torch.full((2,), EASY)
    correct = torch.tensor([True, False])
    first = aepo_rewards(correct.float(), correct, torch.tensor([2.0, 4.0]), b, tracker, cfg)
    assert first.lam.tolist() == [0.0, 0.0, 0.0] and first.reward.tolist() == [1.0, 0.0]
    second = aepo_rewards(correct.float(), correct, torch.tensor([6.0, 8.0]), b, tracker, cfg)
    # target 3 (previous batch), mean 7, var 1: lambda = 4 / (1 + 1) = 2; incorrect g = 5 -> 10, capped at 1
    assert second.target[EASY].item() == 3.0 and second.lam[EASY].item() == 2.0
    assert second.reward.tolist() == [1.0, -1.0]
    assert tracker.value[EASY] == pytest.approx(0.9 * 3 + 0.1 * 7)


def test_alg1_line19_token_bonus():
    w = torch.tensor([[3.0, 1.0, 4.0, 0.0]])
    hwe = torch.tensor([[True, False, True, False]])
    mask = torch.tensor([[1, 1, 1, 0]])
    b, lam = torch.tensor([HARD]), torch.tensor([0.0, 0.0, 0.5])
    # raw = 0.5 * [1, 0, 2, 0]; baseline = per-response mean over 3 tokens = 0.5
    assert token_bonus(w, hwe, mask, b, lam, 2.0).tolist() == [[0.0, -0.5, 0.5, 0.0]]
    assert token_bonus(w, hwe, mask, b, lam, 2.0, baseline="none").tolist() == [[0.5, 0.0, 1.0, 0.0]]
    tanh = token_bonus(w, hwe, mask, b, lam, 2.0, phi="tanh", baseline="none")
    assert tanh[0, :3].tolist() == pytest.approx([0.5 * 0.7615942, 0.0, 0.5 * 0.9640276])


def test_appendix_i_cap_is_per_group_and_logged_when_it_binds():
    """Group 0's correct answer scores at its incorrect one (overlong penalty): its cap is 0, group 1 is
    still shaped (a batch-wide cap would have turned shaping off everywhere)."""
    r_acc = torch.tensor([0.0, 0.0, 1.0, 0.0])
    correct = torch.tensor([True, False, True, False])
    groups = torch.tensor([0, 0, 1, 1])
    n_he = torch.tensor([9.0, 9.0, 9.0, 9.0])
    b = torch.full((4,), HARD)
    target, lam = torch.tensor([0, 0, 5.0], dtype=D), torch.tensor([0, 0, 0.1], dtype=D)
    assert group_caps(r_acc, correct, groups, 1.0).tolist() == [0.0, 0.0, 0.5, 0.5]
    out, metrics = shaped_reward(r_acc, correct, n_he, b, target, lam, "appendix_i", groups=groups)
    # delta = 4: +0.1*4 = 0.4 on group 1 (below its cap 0.5), nothing on group 0
    assert out.tolist() == pytest.approx([0.0, 0.0, 1.4, 0.4])
    assert metrics["aepo/cap_zero_group_frac"] == 0.5 and metrics["aepo/cap_bound_frac"] == 0.5
    big, m2 = shaped_reward(r_acc, correct, n_he, b, target, lam * 10, "appendix_i", groups=groups)
    assert big.tolist() == pytest.approx([0.0, 0.0, 1.5, 0.5]) and m2["aepo/cap_bound_frac"] == 1.0


def test_appendix_i_mild_encouragement_of_failed_easy_answers():
    r_acc = torch.tensor([1.0, 0.0, 0.0])
    correct = r_acc.bool()
    n_he = torch.tensor([1.0, 1.0, 7.0])
    b = torch.full((3,), EASY)
    target, lam = torch.tensor([3.0, 0, 0], dtype=D), torch.tensor([0.1, 0, 0], dtype=D)
    out = hierarchical_reward(r_acc, correct, n_he, b, target, lam, "appendix_i", easy_explore=0.1)
    # correct under target: 0; incorrect under target (delta -2): -0.1*0.1*2, a mild push towards the
    # target; incorrect over (+4): -0.4
    assert out.tolist() == pytest.approx([1.0, -0.02, -0.4])
    off = hierarchical_reward(r_acc, correct, n_he, b, target, lam, "appendix_i", easy_explore=0.0)
    assert off.tolist() == pytest.approx([1.0, 0.0, -0.4])


def test_appendix_i_failed_easy_answers_are_pushed_towards_the_target():
    """Figure 9's "mild encouragement ... a small degree of exploratory thinking if the model initially fails":
    a failed easy answer's reward rises with N_HE up to the target, then falls (the overthinking penalty)."""
    n_he = torch.arange(0.0, 8.0)
    b = torch.full((8,), EASY)
    target, lam = torch.tensor([3.0, 0, 0], dtype=D), torch.tensor([0.1, 0, 0], dtype=D)
    out = hierarchical_reward(torch.zeros(8), torch.zeros(8, dtype=torch.bool), n_he, b, target, lam,
                              "appendix_i", easy_explore=0.1)  # fmt: skip
    # N_HE 0..3: -mu lam (3 - N_HE) = -0.03, -0.02, -0.01, 0; above: -lam (N_HE - 3) = -0.1 .. -0.4
    assert out.tolist() == pytest.approx([-0.03, -0.02, -0.01, 0.0, -0.1, -0.2, -0.3, -0.4])
    diffs = (out[1:] - out[:-1]).tolist()
    assert all(d > 0 for d in diffs[:3]) and all(d < 0 for d in diffs[3:])
    # the push is milder than the penalty above the target, and never lifts a failure above a success
    assert max(diffs[:3]) < -min(diffs[3:])
    ok = hierarchical_reward(
        torch.ones(8), torch.ones(8, dtype=torch.bool), n_he, b, target, lam, "appendix_i"
    )
    assert (ok >= out).all()


def test_alg1_line14_reward_hand_computed():
    r_acc = torch.tensor([1.0, 0.0, 0.0, 1.0])
    correct = r_acc.bool()
    n_he = torch.tensor([2.0, 6.0, 1.0, 4.0])
    lengths = torch.tensor([10, 20, 5, 8])
    b = torch.tensor([EASY, EASY, HARD, HARD])
    groups = torch.tensor([0, 0, 1, 1])
    target, lam = torch.tensor([3.0, 0, 4.0], dtype=D), torch.tensor([0.2, 0, 0.1], dtype=D)
    out = hierarchical_reward(r_acc, correct, n_he, b, target, lam, "alg1", groups=groups, lengths=lengths)
    # S_d: easy incorrect delta 3 -> -0.2*3 = -0.6; hard incorrect delta -3 -> -0.1*3 = -0.3; correct 0
    # cost -lam C/L: -0.2*2/10, -0.2*6/20, -0.1*1/5, -0.1*4/8; caps 0.5 per group
    expect = [1 - 0.04, -0.5, -0.32, 1 - 0.05]  # -0.6 - 0.06 clipped to -0.5
    assert out.tolist() == pytest.approx(expect)
    by_target = hierarchical_reward(r_acc, correct, n_he, b, target, lam, "alg1", groups=groups,
                                    alg1_norm="target")  # fmt: skip
    assert by_target[0].item() == pytest.approx(1 - 0.2 * 2 / 3)
    with pytest.raises(UsageError, match="lengths"):
        hierarchical_reward(r_acc, correct, n_he, b, target, lam, "alg1")


@pytest.mark.parametrize("variant", ["appendix_i", "alg1"])
def test_invariant_correct_never_below_incorrect_within_group(variant):
    g = torch.Generator().manual_seed(2)
    for trial in range(200):
        n = int(torch.randint(2, 40, (1,), generator=g))
        groups = torch.randint(0, 4, (n,), generator=g)
        correct = torch.rand(n, generator=g) < 0.5
        r_acc = correct.float() - 0.6 * (torch.rand(n, generator=g) < 0.3)  # overlong-like penalties
        n_he = torch.randint(0, 200, (n,), generator=g).float()
        b = torch.randint(0, 3, (n,), generator=g)
        target = torch.rand(3, generator=g, dtype=D) * 200
        lam = torch.rand(3, generator=g, dtype=D) * (10.0 ** float(torch.randint(-3, 4, (1,), generator=g)))
        lengths = torch.randint(200, 400, (n,), generator=g)
        out = hierarchical_reward(
            r_acc, correct, n_he, b, target, lam, variant, groups=groups, lengths=lengths
        )
        for k in range(4):
            c, i = correct & (groups == k), ~correct & (groups == k)
            if c.any() and i.any() and r_acc[c].min() > r_acc[i].max():
                assert out[c].min() >= out[i].max() - 1e-6, (trial, k)
