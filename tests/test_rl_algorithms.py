"""Algorithm hooks through the trainer's own code paths: PAEC's term reaches the weights, the H̄ scope, the
AEPO KL-relaxation scope on a crafted batch, and PAEC / AER stop/resume end to end."""

from __future__ import annotations

import pytest
import torch
from test_rl import _cfg, _rows, _train


def _groups(seed=0, n_groups=2, g=4):
    from ares_cli.training.rl.rollout import Group

    gen = torch.Generator().manual_seed(seed)
    return [Group(i, f"p{i}", torch.randint(5, 90, (3 + i,), generator=gen).tolist(),
                  [torch.randint(5, 90, (int(n),), generator=gen).tolist() for n in torch.randint(2, 9, (g,))],
                  ["stop"] * g, ["correct", "incorrect"] * (g // 2)) for i in range(n_groups)]  # fmt: skip


def _paec_grad(tiny_model_dir, *sets):
    """Gradient of one mini-batch backward of the trainer (PPO + KL + PAEC) for the config ``sets``."""
    from ares_cli.models import load_model
    from ares_cli.training.rl.batch import collate, rollout_pass
    from ares_cli.training.rl.registry import build_algorithm
    from ares_cli.training.rl.update import minibatch_backward

    cfg = _cfg("algo=paec", "optim.micro_batch_size=3", *sets)
    torch.manual_seed(0)
    model = load_model(tiny_model_dir)
    algo = build_algorithm(cfg, lambda t: t)
    batch = collate(_groups(), pad_id=0)
    batch.seq.correct = torch.tensor([1.0, 0.0] * 4)
    top_p, top_k = algo.nucleus
    rollout_pass(model, batch, stats=algo.rollout_stats(), prefix="old_", micro=3, temperature=1.0,
                 top_p=top_p, top_k=top_k)  # fmt: skip
    batch.tok.ref_logprob = batch.tok.old_logprob + 0.1 * batch.response_mask
    batch.tok.advantages = torch.linspace(-1, 1, 8)[:, None].expand_as(batch.response_mask).contiguous()
    algo.prepare(batch)
    minibatch_backward(model, batch, algo, cfg, world_size=1, reduce=lambda t: t)
    return model, batch, torch.cat([p.grad.flatten() for p in model.parameters()])


def test_paec_term_reaches_the_weights(tiny_model_dir):
    """grad(α = 1) − grad(α = 0) is exactly −∇H̄ (eq. 11, 15), H̄ computed here from the model directly."""
    from ares_cli.algorithms.paec import masked_entropy
    from ares_cli.training.rl.batch import forward_stats

    model, batch, g1 = _paec_grad(tiny_model_dir, "paec.alpha=1.0", "paec.lambda_ent=0.0")
    _, _, g0 = _paec_grad(tiny_model_dir, "paec.alpha=0.0", "paec.lambda_ent=0.0")
    model.zero_grad(set_to_none=True)
    model.train()
    stats = forward_stats(model, batch, stats=("nucleus_entropy",), temperature=1.0)
    h_bar = masked_entropy(stats.nucleus_entropy, batch.tok.paec_mask, batch.response_mask)
    (-h_bar).backward()
    expect = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert expect.abs().max() > 1e-6
    torch.testing.assert_close(g1 - g0, expect, atol=2e-6, rtol=1e-4)


def test_paec_hbar_scope_step_versus_minibatch():
    """ "step": one H̄ value (and gate) for every optimiser step; "minibatch": each mini-batch's own rows."""
    from ares_cli.algorithms.paec import PAECConfig
    from ares_cli.training.rl.algos_paec import PAEC
    from ares_cli.training.rl.batch import RolloutBatch, TokenValues

    mask = torch.ones(4, 3)
    h = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [3.0, 3.0, 3.0], [3.0, 3.0, 3.0]])
    batch = RolloutBatch(torch.ones(4, 1, dtype=torch.long), torch.ones(4, 1, dtype=torch.long),
                         torch.ones(4, 3, dtype=torch.long), mask, torch.tensor([0, 0, 1, 1]),
                         tok=TokenValues(old_nucleus_entropy=h, old_nucleus_size=torch.full((4, 3), 4),
                                         old_top2_gap=torch.zeros(4, 3)))  # fmt: skip
    values = {}
    for scope in ("step", "minibatch"):
        cfg = _cfg("algo=paec", f"paec.hbar_scope={scope}", "paec.soft_mask=false")
        algo = PAEC(cfg, lambda t: t)
        metrics = algo.prepare(batch)
        assert metrics["paec/h_bar_step"] == pytest.approx(2.0, rel=1e-5)
        got = []
        for rows in (slice(0, 2), slice(2, 4)):
            mb = batch.rows(rows)
            algo.minibatch_start(mb)
            stats = type("S", (), {"nucleus_entropy": mb.tok.old_nucleus_entropy.clone().requires_grad_()})
            _, m = algo.extra_loss(mb, stats)
            got.append(m["paec/h_bar"])
        values[scope] = got
    assert values["step"] == pytest.approx([2.0, 2.0], rel=1e-5)
    assert values["minibatch"] == pytest.approx([1.0, 3.0], rel=1e-5)
    assert PAECConfig().hbar_scope == "step"


@pytest.mark.parametrize("scope", ["window", "start"])
def test_aepo_kl_weight_on_non_start_window_tokens_follows_scope(scope):
    """One response, window 2, a high-entropy spike at positions 2-3: the flagged start is 2 (and 1, whose
    window reaches 2); with scope "window" every token of the flagged windows is relaxed, with "start" only
    the starts."""
    from ares_cli.training.rl.algos_aepo import AEPO
    from ares_cli.training.rl.batch import RolloutBatch, SequenceValues, TokenValues

    ent = torch.tensor([[0.1, 0.1, 5.0, 5.0, 0.1, 0.1, 0.1, 0.1]] * 2)
    mask = torch.ones_like(ent)
    batch = RolloutBatch(torch.ones(2, 1, dtype=torch.long), torch.ones(2, 1, dtype=torch.long),
                         torch.ones(2, 8, dtype=torch.long), mask, torch.tensor([0, 0]),
                         seq=SequenceValues(correct=torch.tensor([1.0, 0.0]), base_reward=torch.tensor([1.0, 0.0])),
                         tok=TokenValues(old_entropy=ent))  # fmt: skip
    cfg = _cfg("algo=aepo", "rollout.group_size=2", "aepo.window=2", "aepo.quantile=0.8", f"aepo.kl_scope={scope}",
               "aepo.kl_rho=0.5", "aepo.kl_init=0.01")  # fmt: skip
    algo = AEPO(cfg, lambda t: t)
    algo.prepare(batch)
    # per-row 80th percentile: 0.1 + ... = sorted [.1]*6 + [5, 5]: pos 5.6 -> 0.1 + 0.6*4.9 = 3.04
    # windows (paper, w = 2): [0.1, 2.55, 5.0, 2.55, 0.1, ...] -> starts 2 only (>= 3.04)
    assert batch.tok.hwe[0].tolist() == [0, 0, 1, 0, 0, 0, 0, 0]
    w = algo.kl_weights(batch)[0]
    relaxed = [2, 3] if scope == "window" else [2]
    expect = [0.01 * (0.5 if t in relaxed else 1.0) for t in range(8)]
    assert w.tolist() == pytest.approx(expect)


@pytest.mark.parametrize("algo", ["paec", "aer"])
def test_stopped_and_resumed_run_reproduces_uninterrupted(algo, tiny_model_dir, tmp_path):
    """The controllers (PAEC's anchor H0; AER's alpha and H0) survive the checkpoint: the resumed run
    matches the uninterrupted one."""
    from safetensors.torch import load_file

    extra = (
        ("paec.anchor_steps=2",)
        if algo == "paec"
        else ("aer.coef_init=0.01", "aer.coef_lr=0.5", "aer.target_ratio=1.0")
    )
    sets = (f"algo={algo}", "steps=3", "save_every=2", *extra)
    _train(_cfg(*sets), tiny_model_dir, tmp_path / "full")
    assert not _train(_cfg(*sets, "max_steps_this_run=1"), tiny_model_dir, tmp_path / "resumed").complete
    assert _train(_cfg(*sets), tiny_model_dir, tmp_path / "resumed").complete
    full, resumed = _rows(tmp_path / "full/metrics.jsonl"), _rows(tmp_path / "resumed/metrics.jsonl")
    assert [r["step"] for r in resumed] == [1, 2, 3]
    for a, b in zip(full, resumed, strict=True):
        for key in a:
            if not key.startswith("time/") and key != "tokens_per_s":
                assert a[key] == pytest.approx(b[key], abs=1e-6), (a["step"], key)
    key = "paec/h0" if algo == "paec" else "aer/alpha"
    assert resumed[-1][key] == pytest.approx(full[-1][key])
    wa = load_file(str(tmp_path / "full/model/model.safetensors"))
    wb = load_file(str(tmp_path / "resumed/model/model.safetensors"))
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], atol=1e-6, rtol=0)
