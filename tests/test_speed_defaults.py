"""The fast defaults change no gradient: token-budget micro-batches (RL and SFT) against the old row-count
default, and the skipped old-policy pass of a strictly on-policy step against running it, for every
algorithm preset, through the trainer's own phase functions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from test_rl import _cfg

from ares_cli.training.rl.config import PRESETS

OLD_DEFAULT = ("optim.max_tokens_per_micro_batch=null",)
ON_POLICY = (
    "rollout.prompts_per_step=2",
    "optim.mini_batch_size=2",
    "optim.micro_batch_size=4",
    "optim.grad_clip=0",
)


def _groups():
    from ares_cli.training.rl.rollout import Group

    gen = torch.Generator().manual_seed(0)
    return [Group(i, f"p{i}", torch.randint(5, 90, (3 + i,), generator=gen).tolist(),
                  [torch.randint(5, 90, (int(n),), generator=gen).tolist() for n in torch.randint(1, 12, (4,))],
                  ["stop"] * 4, ["correct", "incorrect", "correct", "correct"]) for i in range(2)]  # fmt: skip


class _Recorder:
    """An optimizer that records the gradient it is asked to apply."""

    def __init__(self, model):
        self.model, self.param_groups, self.grads = model, [{}], []

    def step(self):
        params = list(self.model.parameters())
        self.grads.append(
            torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params])
        )

    def zero_grad(self, set_to_none=True):
        self.model.zero_grad(set_to_none=set_to_none)


def _rl_step(model_dir, algo: str, *sets: str):
    """One RL step's phases after the rollout (batch, old-policy and reference passes, rewards, advantages,
    update): (the applied gradient, the update metrics, the step's mean entropy, the batch)."""
    from fixtures_tiny_model import tiny_tokenizer

    from ares_cli.models import load_model
    from ares_cli.training.rl import phases
    from ares_cli.training.rl.batch import BatchMeta, collate
    from ares_cli.training.rl.registry import build_algorithm
    from ares_cli.training.rl.step_metrics import Timer

    torch.manual_seed(0)  # as set_up seeds every RNG
    cfg = _cfg(f"algo={algo}", "kl.coef=0.05", *ON_POLICY, *sets)
    model, ref = load_model(model_dir), load_model(model_dir)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    run = SimpleNamespace(cfg=cfg, algo=build_algorithm(cfg, lambda t: t), reduce=lambda t: t, model=model, ref=ref, ref_placement="device",
                          engine=None, dist=SimpleNamespace(world_size=1, rank=0, device="cpu"))  # fmt: skip
    run.optimizer = _Recorder(model)
    groups = _groups()
    batch = collate(groups, pad_id=0)
    batch.seq.base_reward = torch.tensor([x for g in groups for x in g.correct], dtype=torch.float32)
    batch.seq.correct = batch.seq.base_reward.clone()
    batch.meta = BatchMeta(tokenizer=tiny_tokenizer(), step_groups=len(groups))
    phases.old_policy_pass(run, batch)
    ran_pass = batch.tok.old_logprob is not None
    phases.reference_pass(run, batch)
    rewards, bonus, _ = phases.reward(run, batch)
    phases.advantage(run, batch, rewards, bonus)
    metrics, _ = phases.update(run, batch, step=0, opt_step=0, timer=Timer())
    mask = batch.response_mask
    entropy = float((batch.tok.old_entropy * mask).sum() / mask.sum())
    return run.optimizer.grads[0], metrics, entropy, ran_pass


ALGOS = sorted(PRESETS)
LOSS_KEYS = ("loss", "pg_loss", "kl_loss")


@pytest.mark.parametrize("algo", ALGOS)
def test_new_defaults_leave_every_algorithms_gradient_unchanged(algo, tiny_model_dir, monkeypatch):
    """Token-budget micro-batches and the skipped pass together against the old row-count default with
    the old-policy pass forced (as it always ran): the same gradient, losses and entropy within 1e-6."""
    from ares_cli.training.rl import update

    new_grad, new_metrics, new_entropy, _ = _rl_step(tiny_model_dir, algo)
    with monkeypatch.context() as m:
        m.setattr(update, "on_policy", lambda *a: False)
        old_grad, old_metrics, old_entropy, ran = _rl_step(tiny_model_dir, algo, *OLD_DEFAULT)
    assert ran and old_grad.abs().max() > 0
    torch.testing.assert_close(new_grad, old_grad, atol=1e-6, rtol=0)
    for key in LOSS_KEYS:
        if key in old_metrics:
            assert new_metrics[key] == pytest.approx(old_metrics[key], abs=1e-6), key
    assert new_entropy == pytest.approx(old_entropy, abs=1e-6)


@pytest.mark.parametrize("algo", ["grpo", "gspo", "cispo", "aepo", "paec", "aer"])
def test_skipping_the_old_policy_pass_changes_no_gradient(algo, tiny_model_dir, monkeypatch):
    """Same config, the pass skipped (where allowed) or forced: the same gradient within 1e-6; AEPO, PAEC
    and AER, whose hooks read the old policy's statistics, always run it."""
    from ares_cli.training.rl import update

    grad, metrics, entropy, ran = _rl_step(tiny_model_dir, algo)
    assert ran == (algo in ("aepo", "paec", "aer"))
    with monkeypatch.context() as m:
        m.setattr(update, "on_policy", lambda *a: False)
        forced_grad, forced_metrics, forced_entropy, forced_ran = _rl_step(tiny_model_dir, algo)
    assert forced_ran
    torch.testing.assert_close(grad, forced_grad, atol=1e-6, rtol=0)
    assert metrics["loss"] == pytest.approx(forced_metrics["loss"], abs=1e-6)
    assert entropy == pytest.approx(forced_entropy, abs=1e-6)


def test_the_pass_stays_when_the_update_is_not_strictly_on_policy():
    from ares_cli.training.rl.registry import build_algorithm
    from ares_cli.training.rl.update import on_policy

    def decide(*sets, groups=8, world=1):
        cfg = _cfg("rollout.prompts_per_step=8", *sets)
        return on_policy(cfg.optim, build_algorithm(cfg, lambda t: t), groups, world)

    assert decide("optim.mini_batch_size=8")
    assert decide("optim.mini_batch_size=8", world=2)
    assert not decide("optim.mini_batch_size=4")  # two optimiser steps: θ moves before the second
    assert not decide("optim.mini_batch_size=8", "optim.ppo_epochs=2")  # a second epoch reads θ_old
    assert not decide("optim.mini_batch_size=8", groups=9, world=2)  # 5 prompts on a rank, 4 per step
    for algo in ("aepo", "paec", "aer"):  # their hooks read the old policy before the update
        assert not decide("optim.mini_batch_size=8", f"algo={algo}")


def test_auto_budget_plans_by_tokens_except_for_per_micro_batch_statistics():
    from ares_cli.training.micro_batches import AUTO_BUDGET, budget_setting, plan_micro_batches, token_budget

    assert token_budget("auto", [10, 3000], 1) == 3000 and token_budget("auto", [10, 3000], 4) == 12000
    assert token_budget("auto", [10, 20], 4) == AUTO_BUDGET
    assert token_budget(None, [10], 4) is None and token_budget(64, [10], 4) == 64
    assert plan_micro_batches([4] * 6, [30, 2, 12, 3, 28, 1], rows=2, max_tokens="auto") == [
        [0, 1, 2, 3, 4, 5]
    ]
    assert budget_setting(_cfg()) == "auto"
    for algo in ("clip_cov", "kl_cov", "topent"):  # covariances / entropy threshold per micro-batch
        assert budget_setting(_cfg(f"algo={algo}")) is None
    assert budget_setting(_cfg("algo=clip_cov", "optim.max_tokens_per_micro_batch=512")) == 512


# ---- SFT ------------------------------------------------------------------------------------------------
def _sft_gradient(model_dir, data, **kw):
    from ares_cli.models import load_model, load_tokenizer
    from ares_cli.training.sft import SFTConfig, StepPlan, accumulate_gradients, global_counts
    from ares_cli.training.sft_data import load_examples

    config = SFTConfig(batch_size=8, max_seq_len=96, **kw)
    model = load_model(model_dir)
    tok = load_tokenizer(model_dir)
    examples, _ = load_examples(data, tok, config.max_seq_len)
    run = SimpleNamespace(config=config, examples=examples, steps_per_epoch=3, n_micro=8 // config.micro_batch_size,
                          dist=SimpleNamespace(rank=0, world_size=1, device="cpu"), engine=None, model=model,
                          forward=model, pad_id=tok.pad_token_id or 0, processor=None,
                          autocast=torch.autocast("cpu", enabled=False))  # fmt: skip
    _, local = StepPlan(run).micro_batches(0)
    n_response, _ = global_counts(local)
    loss = accumulate_gradients(run, local, n_response)
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return grads, float(loss) / n_response, len(local)


@pytest.mark.parametrize("batching", ["length_grouped", "packed"])
def test_sft_token_budget_leaves_the_gradient_unchanged(tiny_chars_model_dir, tmp_path, batching):
    from fixtures_tiny_model import write_sft_jsonl

    model_dir, data = tiny_chars_model_dir, write_sft_jsonl(tmp_path / "sft.jsonl", 24)
    old, old_loss, old_n = _sft_gradient(model_dir, data, micro_batch_size=2, max_tokens_per_micro_batch=None,
                                         batching=batching)  # fmt: skip
    new, new_loss, new_n = _sft_gradient(model_dir, data, micro_batch_size=2, batching=batching)
    tight, tight_loss, tight_n = _sft_gradient(model_dir, data, micro_batch_size=2, max_tokens_per_micro_batch=80,
                                               batching=batching)  # fmt: skip
    assert old_n == 4 and new_n == 1 and tight_n > 1  # the plans really differ
    assert old.abs().max() > 0
    for grad, loss in ((new, new_loss), (tight, tight_loss)):
        torch.testing.assert_close(grad, old, atol=1e-6, rtol=0)
        assert loss == pytest.approx(old_loss, abs=1e-6)
