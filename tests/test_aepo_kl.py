"""AEPO token-adaptive KL (ARES eq. 1, algorithm 1 lines 25, 29, 33) and the per-step metrics."""

import pytest
import torch

from ares_cli.algorithms.aepo_kl import aepo_step_metrics, nonwindow_kl_stats, token_kl_coef, token_kl_weights
from ares_cli.algorithms.buckets import EASY, HARD, MEDIUM
from ares_cli.algorithms.controllers import HETargetTracker


def test_eq1_token_adaptive_kl_weights():
    hwe = torch.tensor([[True, False, False], [False, True, False]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    b = torch.tensor([HARD, EASY])
    # beta_d * rho^m: hard beta 3 -> (3*0.5, 3, pad 0); easy beta 1 -> (1, 0.5, 1)
    w = token_kl_weights(hwe, mask, b, (1.0, 2.0, 3.0), 0.5)
    assert w.tolist() == [[1.5, 3.0, 0.0], [1.0, 0.5, 1.0]]
    c = token_kl_coef(hwe, mask, b, [0.1, 0.2, 0.3], (1.0, 2.0, 3.0), 0.5)
    assert torch.allclose(c, torch.tensor([[0.45, 0.9, 0.0], [0.1, 0.05, 0.1]]))


def test_alg1_line33_nonwindow_kl_signal():
    kld = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 4.0, 4.0, 4.0]])
    hwe = torch.tensor([[False, True, False, False], [False, False, False, False]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    b = torch.tensor([MEDIUM, MEDIUM])
    s, c = nonwindow_kl_stats(kld, hwe, mask, b, "sequence")
    # row means over non-window tokens: (1+3)/2 = 2 and 4; mean over rows 3
    assert s.tolist() == [0.0, 6.0, 0.0] and c.tolist() == [0.0, 2.0, 0.0]
    s, c = nonwindow_kl_stats(kld, hwe, mask, b, "alg1")
    # (1/L_i) sum 1[m=0] kld: (1+3)/3 and 8/2
    assert s[MEDIUM].item() == pytest.approx(4 / 3 + 4) and c[MEDIUM].item() == 2
    s, c = nonwindow_kl_stats(kld, hwe, mask, b, "token")
    assert (s[MEDIUM].item(), c[MEDIUM].item()) == (12.0, 4.0)


def test_step_metrics():
    hwe = torch.tensor([[True, False, False], [False, True, True]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    b = torch.tensor([EASY, HARD])
    tr = HETargetTracker("batch")
    mom = tr.moments(hwe.sum(1).float(), b)
    kl = (torch.tensor([0.2, 0.0, 0.9]), torch.tensor([2.0, 0.0, 3.0]))
    out = aepo_step_metrics(
        threshold=1.5, hwe=hwe, mask=mask, buckets=b, moments=mom, target=tr.targets(mom),
        lam=torch.zeros(3), kappa=[0.1, 0.2, 0.3], kl_ctrl=kl, batch_threshold_value=1.4,
    )  # fmt: skip
    assert out["aepo/threshold"] == 1.5 and out["aepo/threshold_batch"] == pytest.approx(1.4)
    assert out["aepo/window_frac"] == pytest.approx(3 / 5)
    assert out["aepo/easy/size"] == 1 and out["aepo/medium/size"] == 0 and out["aepo/hard/n_he"] == 2
    assert out["aepo/hard/response_len"] == 3 and out["aepo/easy/response_len"] == 2
    assert out["aepo/hard/kl_nonwindow"] == pytest.approx(0.3) and out["aepo/medium/kl_nonwindow"] == 0
    assert out["aepo/hard/kappa"] == pytest.approx(0.3) and out["aepo/easy/target"] == 1.0


def test_factories_follow_config():
    from ares_cli.algorithms.aepo import AEPOConfig
    from ares_cli.algorithms.aepo_kl import kl_controller_from_config
    from ares_cli.algorithms.aepo_reward import target_tracker_from_config

    cfg = AEPOConfig(kl_init=0.02, kl_target=(0.1, 0.1, 0.1), target_source="running_mean")
    ctl = kl_controller_from_config(cfg)
    assert ctl.kappa == [0.02] * 3 and ctl.target == [0.1] * 3
    assert target_tracker_from_config(cfg).source == "running_mean"
