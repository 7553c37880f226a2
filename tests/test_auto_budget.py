"""The ``auto`` micro-batch budget is chosen by the device, and choosing it changes no gradient: on a CPU it is
``CPU_AUTO_BUDGET`` tokens, on a GPU the micro-batch the plan's memory estimate checks; the losses with
per-micro-batch statistics keep the row count on every device."""

from __future__ import annotations

import pytest
import torch
from test_speed_defaults import _rl_step


def test_auto_means_the_cpu_budget_on_a_cpu_and_the_planned_micro_batch_on_a_gpu():
    from ares_cli.training.micro_batches import AUTO_BUDGET, CPU_AUTO_BUDGET, plan_micro_batches, token_budget

    assert token_budget("auto", [10, 3000], 64, "cpu") == CPU_AUTO_BUDGET
    assert token_budget("auto", [10, 3000], 64, "cuda") == 64 * 3000
    assert token_budget("auto", [10, 3000], 64, "cuda:1") == 64 * 3000
    assert token_budget("auto", [10, 20], 4, "cuda") == AUTO_BUDGET
    assert token_budget(512, [10, 3000], 64, "cpu") == 512 and token_budget(None, [10], 4, "cpu") is None
    # 64 rows of 41 + 128 tokens: one micro-batch on a GPU, the CPU budget's passes on a CPU
    prompts, responses = [41] * 64, [128] * 64
    assert len(plan_micro_batches(prompts, responses, rows=64, max_tokens="auto", device="cuda")) == 1
    on_cpu = plan_micro_batches(prompts, responses, rows=64, max_tokens="auto", device="cpu")
    assert on_cpu == plan_micro_batches(prompts, responses, rows=64, max_tokens=CPU_AUTO_BUDGET)
    assert len(on_cpu) == -(-64 // (CPU_AUTO_BUDGET // 169))


def test_the_trainer_plans_auto_for_the_device_its_batch_is_on():
    from ares_cli.training.micro_batches import CPU_AUTO_BUDGET, plan_micro_batches
    from ares_cli.training.rl.batch import collate, micro_plan
    from ares_cli.training.rl.rollout import Group

    groups = [Group(i, f"p{i}", [5] * 41, [[7] * 128] * 8, ["stop"] * 8, ["correct"] * 8) for i in range(8)]
    batch = collate(groups, pad_id=0)
    assert batch.prompt_ids.device.type == "cpu"
    plan = micro_plan(batch, rows=64, max_tokens="auto")
    assert plan == plan_micro_batches([41] * 64, [128] * 64, rows=64, max_tokens=CPU_AUTO_BUDGET)
    assert len(plan) > 1  # the GPU rule would form one micro-batch of all 64 rows


@pytest.mark.parametrize("algo", ["grpo", "gspo", "paec"])
def test_auto_gives_the_gradient_of_the_explicit_budget_and_of_rows(algo, tiny_model_dir, monkeypatch):
    """On a CPU with a budget small enough to split the step: the same plan as the explicit budget, so the
    same gradient bit for bit, and the row-count gradient within 1e-6."""
    from ares_cli.training import micro_batches

    monkeypatch.setattr(micro_batches, "CPU_AUTO_BUDGET", 40)
    auto, auto_metrics, _, _ = _rl_step(tiny_model_dir, algo, "optim.micro_batch_size=8")
    explicit, explicit_metrics, _, _ = _rl_step(
        tiny_model_dir, algo, "optim.micro_batch_size=8", "optim.max_tokens_per_micro_batch=40"
    )
    rows, rows_metrics, _, _ = _rl_step(
        tiny_model_dir, algo, "optim.micro_batch_size=8", "optim.max_tokens_per_micro_batch=null"
    )
    assert rows.abs().max() > 0
    assert torch.equal(auto, explicit) and auto_metrics["loss"] == explicit_metrics["loss"]
    torch.testing.assert_close(auto, rows, atol=1e-6, rtol=0)
    assert auto_metrics["loss"] == pytest.approx(rows_metrics["loss"], abs=1e-6)


@pytest.mark.parametrize("algo", ["clip_cov", "kl_cov", "topent"])
def test_auto_keeps_the_row_count_for_per_micro_batch_statistics_on_a_cpu(algo, tiny_model_dir, monkeypatch):
    """Their statistics depend on which rows share a micro-batch: ``auto`` must give the row-count plan's
    gradient exactly, whatever the CPU budget is."""
    from ares_cli.training import micro_batches

    monkeypatch.setattr(micro_batches, "CPU_AUTO_BUDGET", 40)
    sets = ("optim.micro_batch_size=2",)
    auto, _, _, _ = _rl_step(tiny_model_dir, algo, *sets)
    rows, _, _, _ = _rl_step(tiny_model_dir, algo, *sets, "optim.max_tokens_per_micro_batch=null")
    assert rows.abs().max() > 0
    assert torch.equal(auto, rows)
