"""AER (reconstruction of shared/notes/aer.md): allocation, the coefficient controller, H0 anchor, loss,
checkpoint round trip, and the trainer hooks, against hand-computed values."""

from __future__ import annotations

import pytest
import torch
from test_rl import _cfg, _rows, _train

from ares_cli.algorithms.aer import AERConfig, aer_loss, coef_update, entropy_sums, sample_weights
from ares_cli.algorithms.controllers import AERController
from ares_cli.errors import UsageError


def test_defaults_are_paecs_aer_settings():
    cfg = AERConfig()
    assert (cfg.target_ratio, cfg.acc_threshold, cfg.coef_lr) == (0.4, 0.2, 0.005)
    assert (cfg.coef_init, cfg.coef_min, cfg.allocation, cfg.update_rule) == (
        0.0,
        0.0,
        "gate",
        "proportional",
    )
    with pytest.raises(UsageError, match="allocation"):
        AERConfig(allocation="soft")
    with pytest.raises(UsageError):
        AERConfig(coef_init=0.1, coef_max=0.05)


def test_difficulty_aware_allocation():
    acc = torch.tensor([0.0, 1 / 8, 2 / 8, 0.2, 1.0])
    assert sample_weights(acc, AERConfig()).tolist() == [1.0, 1.0, 0.0, 1.0, 0.0]  # acc <= 0.2
    lin = sample_weights(acc, AERConfig(allocation="linear"))
    assert lin.tolist() == pytest.approx([1.0, 0.875, 0.75, 0.8, 0.0])


def test_alpha_rises_below_target_and_falls_above():
    cfg = AERConfig(coef_max=0.05)
    assert coef_update(0.01, entropy=0.3, target=0.5, cfg=cfg) == pytest.approx(0.01 + 0.005 * 0.2)
    assert coef_update(0.01, entropy=0.9, target=0.5, cfg=cfg) == pytest.approx(0.01 - 0.005 * 0.4)
    assert coef_update(0.0, entropy=0.9, target=0.5, cfg=cfg) == 0.0  # clipped at alpha_min = 0
    assert coef_update(0.0499, entropy=0.0, target=1.0, cfg=cfg) == 0.05  # clipped at alpha_max
    sign = AERConfig(update_rule="sign")
    assert coef_update(0.01, 0.49, 0.5, sign) == pytest.approx(0.015)
    assert coef_update(0.01, 0.51, 0.5, sign) == pytest.approx(0.005)
    assert coef_update(0.01, 0.5, 0.5, sign) == pytest.approx(0.01)


def test_controller_anchor_target_and_global_update():
    cfg = AERConfig(anchor_steps=2, coef_init=0.01)
    ctrl = AERController(cfg, all_reduce=lambda t: 2 * t)  # two identical ranks: means unchanged
    assert ctrl.h0 is None and ctrl.update(torch.tensor(1.0), torch.tensor(1.0)) == 0.01  # no anchor yet
    ctrl.anchor(torch.tensor(10.0), torch.tensor(10.0))  # H = 1.0
    ctrl.anchor(torch.tensor(6.0), torch.tensor(10.0))  # H = 0.6
    ctrl.anchor(torch.tensor(0.0), torch.tensor(10.0))  # frozen after K = 2
    assert ctrl.h0 == pytest.approx(0.8) and ctrl.target == pytest.approx(0.32)
    assert ctrl.update(torch.tensor(2.0), torch.tensor(10.0)) == pytest.approx(0.01 + 0.005 * (0.32 - 0.2))
    assert ctrl.update(torch.tensor(5.0), torch.tensor(10.0)) == pytest.approx(0.0106 - 0.005 * (0.5 - 0.32))
    # checkpoint round trip: a fresh controller loaded from the state continues identically
    fresh = AERController(cfg)
    fresh.load_state_dict(ctrl.state_dict())
    assert (fresh.alpha, fresh.h0, fresh.steps) == (ctrl.alpha, ctrl.h0, ctrl.steps)
    assert fresh.update(torch.tensor(1.0), torch.tensor(10.0)) == ctrl.update(
        torch.tensor(1.0), torch.tensor(10.0)
    )


def test_loss_value_gradient_and_gated_sums():
    h = torch.tensor([[1.0, 2.0, 9.0], [3.0, 4.0, 5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    w = torch.tensor([1.0, 0.0])
    loss = aer_loss(h, mask, w, alpha=0.1, normaliser=5.0)
    assert loss.item() == pytest.approx(-0.1 * 3.0 / 5.0)  # only the gated row, over all 5 tokens
    loss.backward()
    torch.testing.assert_close(h.grad, torch.tensor([[-0.02, -0.02, 0.0], [0.0, 0.0, 0.0]]))
    assert [float(x) for x in entropy_sums(h, mask)] == [15.0, 5.0]
    assert [float(x) for x in entropy_sums(h, mask, w)] == [3.0, 2.0]


def test_trainer_runs_aer_and_the_controller_follows_its_rule(tiny_model_dir, tmp_path):
    sets = ("algo=aer", "steps=3", "aer.coef_init=0.02", "aer.target_ratio=1.0", "aer.coef_lr=0.5",
            "aer.allocation=linear")  # fmt: skip
    _train(_cfg(*sets), tiny_model_dir, tmp_path)
    rows = _rows(tmp_path / "metrics.jsonl")
    assert rows[0]["aer/alpha"] == pytest.approx(0.02)
    for prev, row in zip(rows, rows[1:], strict=False):
        assert row["aer/alpha"] == pytest.approx(prev["aer/alpha_next"])  # alpha at t comes from H_{t-1}
    for row in rows:
        expect = coef_update(row["aer/alpha"], row["aer/entropy"], row["aer/target"], AERConfig(coef_lr=0.5))
        assert row["aer/alpha_next"] == pytest.approx(expect)
        assert row["aer/target"] == pytest.approx(rows[0]["aer/h0"])  # tau = 1, H0 frozen after step 1
