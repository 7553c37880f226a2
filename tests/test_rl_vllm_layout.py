"""The RL trainer's GPU layout with the vllm backend, against the strict vLLM stand-in (tests/vllm_standin.py):
the engine sleeps after every rollout and is woken (weights, then KV cache) around the sync, the allocator's
cache is handed back between phases, and under 2-rank ZeRO-3 (gloo) each rank builds its own engine and a
sync's extra memory is the largest parameter, not the model (benchmarks/bench_sync_memory.py measures it)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
SETS = ["algo=grpo", "steps=2", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4",
        "rollout.backend=vllm", "optim.mini_batch_size=2", "optim.micro_batch_size=2", "grading.workers=1",
        "save_every=0"]  # fmt: skip


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_sync_memory", REPO / "benchmarks" / "bench_sync_memory.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_free_cached_memory_only_where_cuda_was_used():
    from ares_cli.training.rl.engines import free_cached_memory

    calls = []

    def fake(available, initialized):
        cuda = SimpleNamespace(is_available=lambda: available, is_initialized=lambda: initialized,
                               empty_cache=lambda: calls.append(1))  # fmt: skip
        return SimpleNamespace(cuda=cuda)

    free_cached_memory(fake(False, False))
    free_cached_memory(fake(True, False))
    assert calls == []
    free_cached_memory(fake(True, True))
    assert calls == [1]


def _train(tmp_path, model_dir, sets, monkeypatch):
    import vllm_standin

    from ares_cli.data.loader import load_problems
    from ares_cli.training.rl import engines
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.trainer import train_rl

    monkeypatch.setitem(__import__("sys").modules, "vllm", vllm_standin.module())
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    vllm_standin.StrictLLM.instances.clear()
    events: list[str] = []
    monkeypatch.setattr(engines, "free_cached_memory", lambda torch=None: events.append("empty_cache"))
    cfg = resolve_rl_config(sets=[*SETS, *sets])
    train_rl(cfg, model_path=model_dir, problems=load_problems("toy-train", limit=8).records, val_problems=None,
             out_dir=tmp_path / "out", log=lambda m: None)  # fmt: skip
    [llm] = vllm_standin.StrictLLM.instances
    return llm, events


def test_the_engine_sleeps_through_the_update_and_wakes_around_the_sync(
    tiny_model_dir, tmp_path, monkeypatch
):
    llm, frees = _train(tmp_path, tiny_model_dir, ["rollout.sleep_mode=on"], monkeypatch)
    assert llm.kw["enable_sleep_mode"] is True and llm.kw["seed"] == 0
    assert "distributed_executor_backend" not in llm.kw  # one process: the default in-process executor
    steps = "|".join(llm.events).split("sleep(level=1)")
    assert len(steps) == 3  # two rollouts, each followed by a sleep
    for after in steps[1:]:  # what follows each sleep: weights back, the sync, then the KV cache, the resets
        calls = [e for e in after.split("|") if e]
        assert calls[:2] == ["wake_up(weights)", "wake_up(kv_cache)"] and calls[2] == "reset_prefix_cache"
    n_params = len({n for n, _ in llm.model.loaded})
    assert len(llm.model.loaded) == 2 * n_params  # one sync per step, every parameter once
    assert frees.count("empty_cache") == 4  # after each rollout (sleep) and before each sync


def test_sleep_mode_auto_is_off_on_cpu_and_per_sample_seeds_reach_the_engine(
    tiny_model_dir, tmp_path, monkeypatch
):
    llm, _ = _train(tmp_path, tiny_model_dir, ["rollout.per_sample_seeds=true"], monkeypatch)
    assert "enable_sleep_mode" not in llm.kw and not any(e.startswith("sleep") for e in llm.events)
    _, params = llm.calls[0]
    assert all(p.kw["n"] == 1 for p in params) and len({p.kw["seed"] for p in params}) == len(params)


def test_tensor_parallel_size_must_divide_the_ranks_and_needs_vllm():
    from ares_cli.errors import UsageError
    from ares_cli.training.rl.checks import check_world_size
    from ares_cli.training.rl.config import resolve_rl_config

    cfg = resolve_rl_config(sets=[*SETS, "rollout.tensor_parallel_size=2"])
    check_world_size(cfg, 2)
    with pytest.raises(UsageError, match="tensor_parallel_size 2 does not divide the 3 ranks"):
        check_world_size(resolve_rl_config(sets=["rollout.prompts_per_step=6", "optim.mini_batch_size=3",
                                                 "rollout.tensor_parallel_size=2"]), 3)  # fmt: skip
    with pytest.raises(UsageError, match="needs the vllm backend"):
        resolve_rl_config(sets=["rollout.backend=hf", "rollout.tensor_parallel_size=2"])
    with pytest.raises(UsageError, match="kl.reference=zero3 needs a DeepSpeed ZeRO-3 config"):
        resolve_rl_config(sets=["kl.reference=zero3"])


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs deepspeed")
def test_two_rank_zero3_each_rank_its_engine_and_a_sync_costs_one_parameter(tiny_model_dir, tmp_path):
    import torch
    from safetensors.torch import load_file

    bench = _bench()
    records = bench.launch(tiny_model_dir, tmp_path / "out", 2, [], tmp_path)
    for rank, rec in enumerate(records):
        kw = rec["engine_kwargs"]
        assert rec["env"]["RANK"] == str(rank) and rec["engines_built"] == 1 and rec["zero_stage"] == 3
        assert kw["distributed_executor_backend"] == "external_launcher" and kw["data_parallel_size"] == 2
        assert kw["seed"] == rank and kw["enable_sleep_mode"] is True
        for sync in rec["syncs"]:
            assert sync["per_call"] == [1]  # one (name, tensor) pair per load_weights call
            assert sync["before"] == 0  # every parameter partitioned outside the sync
            assert sync["peak"] == max(sync["sizes"]) < sum(sync["sizes"]) / 4
    saved = load_file(str(tmp_path / "out" / "model" / "model.safetensors"))
    for rec in records:  # the last sync pushed the final weights, on both ranks
        for name, total in rec["last_sync"].items():
            if name in saved:
                assert total == pytest.approx(saved[name].to(torch.float64).sum().item(), abs=1e-9), name
    print(json.dumps(bench.summary(records)))
