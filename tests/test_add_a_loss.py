"""docs/architecture.md's "Add a loss", followed from outside the package: a loss written here, declared
through the public API, checked against its formula, refused when misconfigured, and trained with."""

from __future__ import annotations

import json

import pytest
import torch

from ares_cli.algorithms.loss_aggregation import Aggregation
from ares_cli.algorithms.policy_loss_core import POLICY_LOSSES, finish, masked_inputs, token_ratio
from ares_cli.algorithms.policy_losses import policy_loss
from ares_cli.errors import UsageError

NAME = "tis_pg"
CALLS: list = []


# step 1: the one signature; masked inputs first, the shared modifiers and the aggregation last
def tis_pg(logprob, old_logprob, advantages, mask, *, config, aggregation, extras=None):
    """Truncated importance-sampling policy gradient: -sg(min(r, 1 + clip_high)) A log pi."""
    CALLS.append(config)
    logprob, old_logprob, advantages = masked_inputs(mask, logprob, old_logprob, advantages)
    log_ratio, ratio = token_ratio(logprob, old_logprob, config)
    a = advantages.detach()
    a = a[:, None].expand_as(logprob) if a.dim() == 1 else a
    weight = ratio.detach().clamp(max=1.0 + config.clip_high)
    truncated = (ratio.detach() > 1.0 + config.clip_high) & mask.bool()
    metrics = {"tis_truncated_frac": float(truncated.sum()) / max(float(mask.sum()), 1.0)}
    return finish(-weight * a * logprob, mask, metrics, config, aggregation, extras, log_ratio, ratio)


@pytest.fixture
def registered():
    # step 2: declared once, with the constants it reads and whether it takes micro-batch statistics
    POLICY_LOSSES.register(NAME, tis_pg, reads=("clip_high",), summary="truncated IS policy gradient")
    CALLS.clear()
    yield
    POLICY_LOSSES.unregister(NAME)


def test_unregistered_the_name_is_refused():
    from ares_cli.training.rl.config import resolve_rl_config

    with pytest.raises(UsageError, match=f"unknown policy loss '{NAME}'"):
        resolve_rl_config(sets=[f"loss.policy_loss={NAME}"])


def test_its_value_and_gradient_match_the_formula(registered):
    from ares_cli.training.rl.config import resolve_rl_config

    cfg = resolve_rl_config(sets=[f"loss.policy_loss={NAME}", "loss.clip_high=0.5"])
    old = torch.tensor([[-1.0, -1.0, -1.0, -1.0]], dtype=torch.float64)
    ratios = [0.5, 1.2, 2.0, 1.0]
    lp = (old + torch.tensor([ratios], dtype=torch.float64).log()).requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    lp_nan = lp.detach().clone()
    lp_nan[0, 3] = float("nan")  # a backend's fill value at the padded position
    lp_nan.requires_grad_(True)
    agg = Aggregation.from_mask("token_mean", mask)
    loss, metrics = policy_loss(
        NAME, lp_nan, old, torch.tensor([2.0]), mask, config=cfg.loss, aggregation=agg
    )
    w = [min(r, 1.5) for r in ratios[:3]]
    expect = sum(-wi * 2.0 * float(x) for wi, x in zip(w, lp[0, :3].detach(), strict=True)) / 3
    assert loss.item() == pytest.approx(expect, rel=1e-12)
    loss.backward()
    assert lp_nan.grad[0].tolist() == pytest.approx([-wi * 2.0 / 3 for wi in w] + [0.0], rel=1e-12)
    assert metrics["tis_truncated_frac"] == pytest.approx(1 / 3) and CALLS[-1] is cfg.loss


def test_the_config_checks_what_it_reads(registered):
    from ares_cli.training.micro_batches import per_micro_batch_statistics
    from ares_cli.training.rl.config import resolve_rl_config

    with pytest.raises(
        UsageError, match=f"'loss.cispo_eps_high' is set, but policy loss '{NAME}' does not read it"
    ):
        resolve_rl_config(sets=[f"loss.policy_loss={NAME}", "loss.cispo_eps_high=2"])
    cfg = resolve_rl_config(sets=[f"loss.policy_loss={NAME}", "loss.log_ratio_clamp=null"])
    assert not per_micro_batch_statistics(cfg.loss)


def test_a_short_rl_trains_with_it(registered, tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    from ares_cli.data.loader import load_problems
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.trainer import train_rl

    sets = [f"loss.policy_loss={NAME}", "loss.clip_high=0.5", "steps=2", "rollout.prompts_per_step=2",
            "rollout.group_size=4", "rollout.max_new_tokens=10", "optim.mini_batch_size=1", "optim.lr=1e-3",
            "grading.workers=1", "grading.grader=test_rl_graders:parity_grade", "grading.trust_grader_code=true",
            "val.every=0", "save_every=0", "kl.coef=0"]  # fmt: skip
    cfg = resolve_rl_config(sets=sets)
    train_rl(cfg, model_path=tiny_model_dir, problems=load_problems("toy-train", limit=8).records,
             val_problems=None, out_dir=tmp_path, log=lambda _m: None, report_to=("jsonl",))  # fmt: skip
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all("tis_truncated_frac" in row for row in rows)
    assert CALLS and all(c is cfg.loss for c in CALLS)
    before = load_file(str(tiny_model_dir / "model.safetensors"))
    after = load_file(str(tmp_path / "model" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)
