"""Stateful controllers: κ_d (ARES eq. 27), threshold EMA (sec. 3.2.1), N_target source (sec. 3.2.2) and
PAEC's anchor H0 (PAEC eq. 12); checkpoint round-trips and injectable all-reduce."""

import copy
import json

import pytest
import torch

from ares_cli.algorithms.controllers import EntropyAnchor, HETargetTracker, KLController, ThresholdEMA
from ares_cli.errors import UsageError


def test_eq27_kl_controller_multiplicative_step_and_clip():
    ctl = KLController(init=0.01, target=(0.02, 0.05, 0.1), step_size=0.1, kappa_min=1e-4, kappa_max=1.0)
    # medium: KL 0.1 / delta 0.05 = 2 -> kappa 0.01 * (1 + 0.1 * (2 - 1)) = 0.011; easy/hard no data
    out = ctl.update(torch.tensor([0.0, 0.2, 0.0]), torch.tensor([0.0, 2.0, 0.0]))
    assert out == pytest.approx([0.01, 0.011, 0.01])
    tight = KLController(init=0.01, target=(1, 1, 1), step_size=10.0, kappa_min=0.005, kappa_max=0.02)
    # KL 0 -> 0.01 * (1 - 10) < 0 -> clipped to kappa_min; KL 3 -> 0.01 * 21 -> kappa_max
    assert tight.update(torch.tensor([0.0, 3.0, 1.0]), torch.ones(3)) == pytest.approx([0.005, 0.02, 0.01])


def test_eq27_kl_hat_moving_average_option():
    ctl = KLController(init=0.01, target=(0.05, 0.05, 0.05), step_size=0.1, ema_decay=0.5)
    ctl.update(torch.tensor([0.05, 0, 0]), torch.tensor([1.0, 0, 0]))
    # KL-hat = 0.5 * 0.05 + 0.5 * 0.15 = 0.1 -> factor 1 + 0.1 * (2 - 1)
    out = ctl.update(torch.tensor([0.15, 0, 0]), torch.tensor([1.0, 0, 0]))
    assert out[0] == pytest.approx(0.01 * 1.1) and ctl.kl_hat[0] == pytest.approx(0.1)


def test_kl_controller_all_reduce_and_state_roundtrip():
    seen = []

    def two_ranks(t):
        seen.append(t.clone())
        return 2 * t

    ctl = KLController(all_reduce=two_ranks)
    ctl.update(torch.tensor([0.2, 0.0, 0.3]), torch.tensor([2.0, 0.0, 3.0]))
    assert len(seen) == 1  # one collective per step
    state = json.loads(json.dumps(ctl.state_dict()))  # plain, serialisable state
    twin = KLController()
    twin.load_state_dict(state)
    for c in (ctl, twin):
        c.update(torch.tensor([0.1, 0.1, 0.1]), torch.ones(3))
    assert twin.kappa == ctl.kappa and twin.steps == ctl.steps == 2
    with pytest.raises(UsageError):
        twin.load_state_dict({"kappa": [1, 1, 1]})


def test_sec321_threshold_ema():
    ema = ThresholdEMA(0.9)
    assert ema.update(1.0) == 1.0
    assert ema.update(2.0) == pytest.approx(1.1)
    twin = ThresholdEMA(0.9)
    twin.load_state_dict(copy.deepcopy(ema.state_dict()))
    assert twin.update(3.0) == ema.update(3.0)


def test_sec322_target_sources():
    b = torch.tensor([0, 0])
    run = HETargetTracker("running_mean")
    m1 = run.moments(torch.tensor([2.0, 4.0]), b)
    assert m1.mean[0] == 3 and m1.var[0] == 1 and m1.count[0] == 2
    assert run.targets(m1)[0] == 3  # no history: the batch itself (lambda = 0)
    run.update(m1)
    m2 = run.moments(torch.tensor([6.0, 8.0]), b)
    assert run.targets(m2)[0] == 3
    run.update(m2)
    assert run.value[0] == pytest.approx(5.0)
    fixed = HETargetTracker("fixed", fixed=(1.0, 2.0, 3.0))
    assert fixed.targets(m2).tolist() == [1.0, 2.0, 3.0]
    batch = HETargetTracker("batch")
    batch.update(m1)
    assert batch.targets(m2)[0] == 7  # the paper as written: the same batch's mean
    with pytest.raises(UsageError):
        HETargetTracker("fixed")


def test_target_tracker_state_roundtrip_and_all_reduce():
    tr = HETargetTracker("ema", decay=0.5, all_reduce=lambda t: 3 * t)
    m = tr.moments(torch.tensor([2.0, 4.0, 10.0]), torch.tensor([0, 0, 2]))
    assert m.count.tolist() == [6.0, 0.0, 3.0] and m.mean.tolist() == [3.0, 0.0, 10.0]
    tr.update(m)
    twin = HETargetTracker("ema", decay=0.5)
    twin.load_state_dict(tr.state_dict())
    assert twin.value == tr.value and twin.seen == tr.seen


def test_paec_eq12_anchor_first_k_steps_then_frozen():
    a = EntropyAnchor(init_steps=2, eps=0.0)
    assert a.h0 is None and a.h_low(0.8) is None
    assert a.update(2.0, 2.0) == pytest.approx(1.0)
    assert a.update(1.0, 2.0) == pytest.approx(0.75)  # mean of 1.0 and 0.5
    assert a.update(0.1, 1.0) == pytest.approx(0.75) and a.frozen
    assert a.h_low(0.8) == pytest.approx(0.6)
    twin = EntropyAnchor(init_steps=2, eps=0.0)
    twin.load_state_dict(a.state_dict())
    assert twin.h0 == a.h0 and twin.frozen
    reduced = EntropyAnchor(init_steps=1, eps=0.0, all_reduce=lambda t: t + torch.tensor([2.0, 2.0]))
    assert reduced.update(1.0, 1.0) == pytest.approx(1.0)  # (1+2)/(1+2)
