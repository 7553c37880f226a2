"""The ablation switches of AEPO (``aepo.reward_shaping``, ``aepo.dynamic_kl``; ARES table 5) and PAEC
(``paec.soft_mask``, ``paec.lambda_ent = 0``; PAEC table 2), through the algorithm hooks on a synthetic
batch: each switch removes exactly its component, and the full method differs on the same batch."""

from __future__ import annotations

import pytest
import torch

from ares_cli.errors import UsageError

# 2 groups of 4: group 0 has 3 correct (easy for n = 4), group 1 none (hard). Lengths vary (padding).
LENGTHS = [12, 9, 16, 5, 16, 11, 7, 14]
CORRECT = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def _batch(seed: int = 0):
    from ares_cli.training.rl.batch import RolloutBatch

    gen = torch.Generator().manual_seed(seed)
    n, t = len(LENGTHS), max(LENGTHS)
    mask = (torch.arange(t)[None, :] < torch.tensor(LENGTHS)[:, None]).float()
    batch = RolloutBatch(
        prompt_ids=torch.ones(n, 3, dtype=torch.long), prompt_mask=torch.ones(n, 3, dtype=torch.long),
        response_ids=torch.randint(5, 90, (n, t), generator=gen), response_mask=mask,
        group=torch.tensor([0] * 4 + [1] * 4),
    )  # fmt: skip
    batch.seq.correct = torch.tensor(CORRECT)
    batch.seq.base_reward = torch.tensor(CORRECT)
    ent = torch.rand(n, t, generator=gen) * 2.0
    ent[3, :5] = 4.0  # the easy group's incorrect response explores a lot: the full reward penalises it
    batch.tok.old_entropy = ent * mask
    batch.tok.old_logprob = -torch.rand(n, t, generator=gen) * mask
    batch.tok.ref_logprob = batch.tok.old_logprob - 0.3 * torch.rand(n, t, generator=gen) * mask
    batch.tok.old_nucleus_entropy = torch.rand(n, t, generator=gen) * mask
    batch.tok.old_nucleus_size = torch.randint(1, 6, (n, t), generator=gen)
    batch.tok.old_top2_gap = torch.rand(n, t, generator=gen) * 3.0
    return batch


def _algo(*sets: str):
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.registry import build_algorithm

    return build_algorithm(resolve_rl_config(sets=["rollout.group_size=4", *sets]), lambda x: x)


# fixed targets below the batch's N_HE make lambda_easy > 0, so the full reward shapes the batch
AEPO = ["algo=aepo", "aepo.target_source=fixed", "aepo.target_fixed=0,0,0"]


# ---- AEPO: reward shaping -------------------------------------------------------------------------------
def test_aepo_reward_shaping_off_gives_the_accuracy_reward():
    full, off = _algo(*AEPO), _algo(*AEPO, "aepo.reward_shaping=false")
    b_full, b_off = _batch(), _batch()
    full.prepare(b_full), off.prepare(b_off)
    r_full, bonus_full, m_full = full.rewards(b_full)
    r_off, bonus_off, m_off = off.rewards(b_off)
    assert not torch.equal(r_full, b_full.seq.base_reward) and m_full["aepo/shaping_abs_mean"] > 0
    assert torch.equal(r_off, b_off.seq.base_reward) and bonus_off is None
    assert m_off == {"aepo/shaping_abs_mean": 0.0}
    metrics = off.after_step(b_off)
    assert not any(k.endswith(("/lambda", "/target")) for k in metrics)
    assert "aepo/easy/kappa" in metrics and "aepo/threshold" in metrics  # dynamic KL still on
    assert {"aepo/easy/lambda", "aepo/hard/target"} <= set(full.after_step(b_full))


def test_aepo_token_bonus_needs_reward_shaping():
    with pytest.raises(UsageError, match="token_bonus needs reward_shaping"):
        _algo("algo=aepo", "aepo.reward_shaping=false", "aepo.token_bonus=true")


# ---- AEPO: dynamic KL -----------------------------------------------------------------------------------
def test_aepo_dynamic_kl_off_gives_uniform_kl_weights_and_a_still_controller():
    full, off = (
        _algo(*AEPO, "aepo.kl_beta=1,2,3"),
        _algo(*AEPO, "aepo.kl_beta=1,2,3", "aepo.dynamic_kl=false"),
    )
    b_full, b_off = _batch(), _batch()
    for algo, b in ((full, b_full), (off, b_off)):
        algo.prepare(b)
        algo.rewards(b)
    mask = b_off.response_mask
    w_off, w_full = off.kl_weights(b_off), full.kl_weights(b_full)
    torch.testing.assert_close(w_off, 0.01 * mask)  # kl_init on every response token, 0 at padding
    assert b_off.tok.hwe.sum() > 0  # windows exist, yet they are not relaxed
    assert len(torch.unique(w_full[mask.bool()])) > 1  # the full method varies per bucket and window
    kappa0 = list(off.kl_ctrl.kappa)
    m_off, m_full = off.after_step(b_off), full.after_step(b_full)
    assert list(off.kl_ctrl.kappa) == kappa0 and list(full.kl_ctrl.kappa) != kappa0
    assert not any(k.endswith("/kappa") for k in m_off)
    # the non-window KL is still measured, so the ablation can be compared with the controller's targets
    assert {k for k in m_off if k.endswith("/kl_nonwindow")} == {
        k for k in m_full if k.endswith("/kl_nonwindow")
    }
    assert "aepo/easy/lambda" in m_off and "aepo/easy/kappa" in m_full


# ---- PAEC: soft mask ------------------------------------------------------------------------------------
def test_paec_soft_mask_off_is_all_ones_on_response_tokens():
    from ares_cli.algorithms.paec import PAECConfig, masked_entropy, position_mask

    full, off = _algo("algo=paec"), _algo("algo=paec", "paec.soft_mask=false")
    b_full, b_off = _batch(), _batch()
    full.prepare(b_full), off.prepare(b_off)
    mask = b_off.response_mask
    assert torch.equal(b_off.tok.paec_mask, mask)
    m_full = b_full.tok.paec_mask[mask.bool()]
    assert float(m_full.mean()) < 0.5  # the full method is selective (quantile 0.8)
    # H_bar is then the plain mean nucleus entropy over all response tokens
    h = b_off.tok.old_nucleus_entropy
    plain = float((h * mask).sum() / mask.sum())
    assert float(masked_entropy(h, b_off.tok.paec_mask, mask, eps=0.0)) == pytest.approx(plain)
    score = torch.rand(mask.shape)
    assert torch.equal(position_mask(score, mask, PAECConfig(soft_mask=False)), mask)


# ---- PAEC: no lower-bound penalty -----------------------------------------------------------------------
def test_paec_without_penalty_keeps_only_the_entropy_bonus():
    from ares_cli.algorithms.paec import PAECConfig, paec_loss

    mask = torch.ones(2, 4)
    h = torch.full((2, 4), 0.5, requires_grad=True)
    m = torch.full((2, 4), 0.7)
    full = paec_loss(h, m, mask, PAECConfig(), h0=2.0)  # H_low = 1.6 > H_bar = 0.5: penalty active
    off = paec_loss(h, m, mask, PAECConfig(lambda_ent=0.0), h0=2.0)
    assert full.penalty > 0 and float(full.loss.detach()) > float(off.loss.detach())
    assert float(off.loss.detach()) == pytest.approx(-8e-4 * off.h_bar)
