"""RL trainer: presets end to end, hooks, dynamic sampling, overlong shaping, micro-batch invariance, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ares_cli.errors import StageFailure, UsageError

GRADER = "test_rl_graders:parity_grade"  # tests/ is on sys.path under pytest; workers inherit it
TINY = ["steps=2", "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=10",
        "optim.mini_batch_size=1", "optim.micro_batch_size=3", "optim.lr=1e-3", "grading.workers=1",
        f"grading.grader={GRADER}", "grading.trust_grader_code=true", "val.every=0", "reward.overlong_buffer=4", "save_every=0"]  # fmt: skip


def _cfg(*sets: str):
    from ares_cli.training.rl.config import resolve_rl_config

    return resolve_rl_config(sets=[*TINY, *sets])


def _problems(n=12):
    from ares_cli.data.loader import load_problems

    return load_problems("toy-train", limit=n).records


def _train(cfg, model_dir, out, val=None, report_to=("jsonl",)):
    from ares_cli.training.rl.trainer import train_rl

    return train_rl(cfg, model_path=model_dir, problems=_problems(), val_problems=val, out_dir=out,
                    log=lambda _m: None, report_to=report_to)  # fmt: skip


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---- config -------------------------------------------------------------------------------------------
def test_presets_and_precedence(tmp_path):
    from ares_cli.training.rl.config import PRESETS, resolve_rl_config

    dapo = resolve_rl_config(sets=["algo=dapo"])
    assert (dapo.loss.clip_high, dapo.loss.aggregation, dapo.kl.coef) == (0.28, "token_mean", 0.0)
    assert dapo.filter.mode == "filter" and dapo.reward.overlong_shaping
    yaml = tmp_path / "rl.yaml"
    yaml.write_text("rl:\n  algo: dapo\n  loss: {clip_high: 0.3}\n  filter: {mode: off}\n")
    cfg = resolve_rl_config(yaml_path=yaml, sets=["loss.clip_high=0.35"])
    assert (cfg.algo, cfg.loss.clip_high, cfg.filter.mode, cfg.loss.aggregation) == (
        "dapo",
        0.35,
        "off",
        "token_mean",
    )
    assert resolve_rl_config(yaml_path=yaml, flags={"algo": "grpo"}).loss.aggregation == "seq_mean_token_mean"
    assert resolve_rl_config(sets=["algo=aepo", "aepo.window=6"]).aepo.window == 6
    with pytest.raises(UsageError, match="algorithm 'grpo' does not read the aepo section"):
        resolve_rl_config(sets=["aepo.window=6"])
    with pytest.raises(UsageError, match="valid: .*aepo"):
        resolve_rl_config(sets=["algo=nope"])
    with pytest.raises(UsageError, match="unknown config key"):
        resolve_rl_config(sets=["loss.nope=1"])
    assert set(PRESETS) == {
        "grpo",
        "dapo",
        "drgrpo",
        "cispo",
        "clip_cov",
        "kl_cov",
        "gspo",
        "gspo_token",
        "entropy",
        "topent",
        "aepo",
        "paec",
        "aer",
    }


def test_registry_lists_valid_names():
    from ares_cli.training.rl.algos import Algorithm
    from ares_cli.training.rl.registry import ALGORITHMS, build_algorithm

    build_algorithm(_cfg("algo=paec"), lambda t: t)
    assert {"aepo", "paec", "grpo"} <= set(ALGORITHMS.names())
    with pytest.raises(ValueError, match="duplicate"):
        ALGORITHMS.register("grpo")(Algorithm)
    with pytest.raises(UsageError, match="valid: "):
        ALGORITHMS.get("nope")


# ---- rewards ------------------------------------------------------------------------------------------
def test_overlong_shaping_hand_computed():
    from ares_cli.training.rl.config import RewardConfig
    from ares_cli.training.rl.rewards import overlong_penalty, response_reward

    # L_max = 20, L_cache = 4: no penalty up to 16 tokens, then -(L - 16) / 4
    assert [overlong_penalty(n, 20, 4) for n in (10, 16, 17, 18, 20)] == [0.0, 0.0, -0.25, -0.5, -1.0]
    cfg = RewardConfig(overlong_shaping=True, overlong_buffer=4, format_penalty=0.5)
    assert response_reward("correct", 19, cfg, 20) == pytest.approx(1.0 - 0.75)
    assert response_reward("invalid", 10, cfg, 20) == pytest.approx(-0.5)


def test_filter_group():
    from ares_cli.training.rl.config import FilterConfig
    from ares_cli.training.rl.rewards import filter_group

    on = FilterConfig(mode="filter", low=0.2, high=0.8)
    assert filter_group([1, 1], [True, True], on).reason == "all_equal"
    assert filter_group([1, 0, 0, 0, 0, 0], [True] + [False] * 5, on).reason == "out_of_band"
    assert filter_group([1, 0], [True, False], on).keep
    assert filter_group([0, 0], [False, False], FilterConfig()).keep


def test_dynamic_sampling_cap_fails_clearly(tiny_model_dir, tmp_path):
    cfg = _cfg("algo=dapo", "grading.grader=math_verify", "filter.max_extra_rounds=1")  # never correct
    with pytest.raises(
        StageFailure,
        match=r"only 0 of 2 prompts kept after 2 rounds \(4 drawn; dropped \d+ "
        r"with all-equal rewards and \d+ with mean accuracy outside \[0.01, 0.99\]",
    ):
        _train(cfg, tiny_model_dir, tmp_path / "out")


# ---- every preset through the trainer ---------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["grpo", "dapo", "drgrpo", "cispo", "clip_cov", "kl_cov", "gspo", "gspo_token",
                                  "entropy", "topent", "aepo", "paec"])  # fmt: skip
def test_preset_runs_end_to_end(algo, tiny_model_dir, tmp_path):
    result = _train(_cfg(f"algo={algo}", "steps=1"), tiny_model_dir, tmp_path)
    assert result.complete and result.stats["steps"] == 1
    (row,) = _rows(tmp_path / "metrics.jsonl")
    assert row["step"] == 1 and 0.0 <= row["accuracy"] <= 1.0 and row["response_len"] > 0
    for key in (
        "reward",
        "entropy",
        "approx_kl_k3",
        "tokens_per_s",
        "time/generate",
        "time/backward",
        "loss",
    ):
        assert key in row
    if algo == "aepo":
        assert "aepo/easy/kappa" in row and "aepo/threshold" in row
    if algo == "paec":
        assert row["paec/h0"] > 0 and "paec/h_bar" in row
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(tmp_path / "model")


def test_hooks_drive_the_trainer(tiny_model_dir, tmp_path):
    """A custom algorithm registered by name changes rewards, KL weights and the loss through the hooks."""
    from ares_cli.training.rl.algos import Algorithm
    from ares_cli.training.rl.config import PRESETS
    from ares_cli.training.rl.registry import ALGORITHMS

    calls = []

    class Probe(Algorithm):
        def prepare(self, batch):
            calls.append("prepare")
            return {"probe/rows": float(len(batch))}

        def rewards(self, batch):
            calls.append("rewards")
            return -batch.seq.base_reward, None, {}

        def kl_weights(self, batch):
            calls.append("kl_weights")
            return torch.zeros_like(batch.response_mask)

        def extra_loss(self, micro, stats):
            calls.append("extra_loss")
            return 0.0 * stats.logprob.sum(), {"probe/extra": 1.0}

        def after_step(self, batch):
            calls.append("after_step")
            return {}

    ALGORITHMS.register("probe", Probe)
    try:
        assert PRESETS["probe"] == {}  # the presets are read from the registry
        _train(_cfg("algo=probe", "steps=1"), tiny_model_dir, tmp_path)
    finally:
        ALGORITHMS.unregister("probe")
    assert "probe" not in PRESETS
    row = _rows(tmp_path / "metrics.jsonl")[0]
    assert calls[:3] == ["prepare", "rewards", "kl_weights"] and calls[-1] == "after_step"
    assert row["probe/rows"] == 8 and row["probe/extra"] == 1.0 and row["kl_weight_mean"] == 0.0
    assert row["reward"] == pytest.approx(-row["reward_base"])


# ---- micro-batch invariance ---------------------------------------------------------------------------
BATCHING = [  # every batching mode: row counts, token budgets (sorted by length), packing, both stats paths
    ("optim.micro_batch_size=1", "optim.max_tokens_per_micro_batch=null"),
    ("optim.micro_batch_size=4", "optim.max_tokens_per_micro_batch=null"),
    ("optim.micro_batch_size=4", "optim.max_tokens_per_micro_batch=null", "optim.stats_path=logits"),
    ("optim.max_tokens_per_micro_batch=auto",),
    ("optim.max_tokens_per_micro_batch=24",),
    ("optim.max_tokens_per_micro_batch=60",),
    ("optim.pack_sequences=true", "optim.micro_batch_size=3", "optim.max_tokens_per_micro_batch=null"),
    ("optim.pack_sequences=true", "optim.max_tokens_per_micro_batch=40"),
]


@pytest.mark.parametrize("algo", ["grpo", "paec", "gspo"])
def test_gradient_independent_of_micro_batch(algo, tiny_model_dir):
    from ares_cli.models import load_model
    from ares_cli.training.rl.batch import collate, micro_plan, rollout_pass
    from ares_cli.training.rl.registry import build_algorithm
    from ares_cli.training.rl.rollout import Group
    from ares_cli.training.rl.update import minibatch_backward

    gen = torch.Generator().manual_seed(0)
    groups = [Group(i, f"p{i}", torch.randint(5, 90, (3 + i,), generator=gen).tolist(),
                    [torch.randint(5, 90, (int(n),), generator=gen).tolist() for n in torch.randint(1, 9, (4,))],
                    ["stop"] * 4, ["correct", "incorrect"] * 2) for i in range(2)]  # fmt: skip
    grads, n_micro = [], []
    for sets in BATCHING:
        cfg = _cfg(f"algo={algo}", *sets)
        model = load_model(tiny_model_dir)
        algo_obj = build_algorithm(cfg, lambda t: t)
        batch = collate(groups, pad_id=0)
        batch.seq.correct = torch.tensor([1.0, 0.0] * 4)
        top_p, top_k = algo_obj.nucleus
        o = cfg.optim
        rollout_pass(model, batch, stats=algo_obj.rollout_stats(), prefix="old_", micro=3, temperature=1.0,
                     top_p=top_p, top_k=top_k, max_tokens=o.max_tokens_per_micro_batch, packed=o.pack_sequences,
                     stats_path=o.stats_path)  # fmt: skip
        batch.tok.ref_logprob = batch.tok.old_logprob + 0.1 * batch.response_mask
        batch.tok.advantages = torch.linspace(-1, 1, 8)[:, None].expand_as(batch.response_mask).contiguous()
        algo_obj.prepare(batch)
        minibatch_backward(model, batch, algo_obj, cfg, world_size=1, reduce=lambda t: t)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        n_micro.append(len(micro_plan(batch, rows=o.micro_batch_size, max_tokens=o.max_tokens_per_micro_batch,
                                      packed=o.pack_sequences)))  # fmt: skip
    assert grads[0].abs().max() > 0
    assert len(set(n_micro)) >= 4  # the modes really split the mini-batch differently
    for sets, g in zip(BATCHING[1:], grads[1:], strict=True):
        torch.testing.assert_close(g, grads[0], atol=1e-6, rtol=0, msg=str(sets))


def test_token_budget_plan_sorts_rows_and_respects_the_budget():
    from ares_cli.training.micro_batches import equalise, padded_fraction, plan_micro_batches

    prompts, responses = [4, 4, 4, 4, 4, 4], [30, 2, 12, 3, 28, 1]
    plan = plan_micro_batches(prompts, responses, rows=2, max_tokens=70)
    assert sorted(i for g in plan for i in g) == list(range(6))
    assert plan == [[0, 4], [1, 2, 3, 5]]  # longest first: 2 x 34 <= 70, then 4 x 16 <= 70
    rows = plan_micro_batches(prompts, responses, rows=2)
    assert rows == [[0, 1], [2, 3], [4, 5]]
    assert padded_fraction(plan, prompts, responses, False) < padded_fraction(rows, prompts, responses, False)
    packed = plan_micro_batches(prompts, responses, rows=2, max_tokens=40, packed=True)
    assert all(sum(prompts[i] + responses[i] for i in g) <= 40 or len(g) == 1 for g in packed)
    assert padded_fraction(packed, prompts, responses, True) == 0.0
    assert plan_micro_batches([9], [100], rows=1, max_tokens=10) == [[0]]  # too long: alone
    eq = equalise([[0, 1, 2], [3]], 4)
    assert len(eq) == 4 and sorted(i for g in eq for i in g) == [0, 1, 2, 3]
    assert equalise([[0]], 3) == [[0], [], []]


# ---- resume ---------------------------------------------------------------------------------------------
def test_stopped_and_resumed_run_reproduces_uninterrupted(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    from ares_cli.data.loader import load_problems

    val = load_problems("toy-val", limit=3).records
    cfg = _cfg("algo=aepo", "steps=3", "save_every=2", "val.every=2")
    _train(cfg, tiny_model_dir, tmp_path / "full", val)
    stopped = _train(_cfg("algo=aepo", "steps=3", "save_every=2", "val.every=2", "max_steps_this_run=1"),
                     tiny_model_dir, tmp_path / "resumed", val)  # fmt: skip
    assert not stopped.complete and (tmp_path / "resumed/checkpoints/step-000001/state.json").is_file()
    assert _train(cfg, tiny_model_dir, tmp_path / "resumed", val).complete

    def comparable(path):
        return [{k: v for k, v in row.items() if not k.startswith("time/") and k != "tokens_per_s"}
                for row in _rows(path)]  # fmt: skip

    full, resumed = (
        comparable(tmp_path / "full/metrics.jsonl"),
        comparable(tmp_path / "resumed/metrics.jsonl"),
    )
    assert [r["step"] for r in resumed] == [0, 1, 2, 3]
    for a, b in zip(full, resumed, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], abs=1e-6), (a["step"], key)
    wa = load_file(str(tmp_path / "full/model/model.safetensors"))
    wb = load_file(str(tmp_path / "resumed/model/model.safetensors"))
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], atol=1e-6, rtol=0)


# ---- one source of defaults, one import direction ---------------------------------------------------------
def test_loss_defaults_have_one_source():
    from dataclasses import fields

    from ares_cli.algorithms.policy_losses import PolicyLossConfig
    from ares_cli.training.rl.config import LossConfig

    lib = {f.name: f.default for f in fields(PolicyLossConfig)}
    shared = [f for f in fields(LossConfig) if f.name in lib]
    assert len(shared) >= 12
    for f in shared:
        assert f.default == lib[f.name], f.name
    assert (lib["clip_high"], lib["cispo_eps_high"], lib["kl_cov_ratio"], lib["kl_cov_coef"]) == (
        0.2,
        5.0,
        2e-4,
        0.1,
    )


def test_paec_temperature_is_not_a_dead_option():
    """PAEC's statistics use the rollout temperature (the trainer's one statistics pass): no second knob."""
    with pytest.raises(UsageError, match="temperature"):
        _cfg("algo=paec", "paec.temperature=0.7")


def test_algorithm_imports_run_one_way():
    import ast

    root = Path(__file__).resolve().parents[1] / "ares_cli/training/rl"

    def imported(name):
        tree = ast.parse((root / name).read_text())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
            f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
            for a in n.names
        }  # fmt: skip

    members = sorted(p.name for p in root.glob("algos*.py"))
    assert {"algos.py", "algos_aepo.py", "algos_paec.py", "algos_aer.py"} <= set(members)
    for name in members:
        deps = imported(name)
        assert not any("registry" in d and "algorithms.registry" not in d for d in deps), name
    assert not any(".algos_" in d for d in imported("algos.py"))


def test_rl_stops_when_the_grader_fails(tiny_model_dir, tmp_path):
    """An error grade scores 0; a grader failing on more than grading.max_error_rate of a step's responses
    stops the run (naming the grader) instead of training on zero rewards."""
    broken = "test_rl_graders:broken_grade"
    with pytest.raises(StageFailure, match=r"grader test_rl_graders:broken_grade failed on \d+ of 8 samples"):
        _train(_cfg(f"grading.grader={broken}"), tiny_model_dir, tmp_path / "stop")
    _train(
        _cfg(f"grading.grader={broken}", "grading.max_error_rate=1.0"), tiny_model_dir, tmp_path / "allowed"
    )
    rows = _rows(tmp_path / "allowed" / "metrics.jsonl")
    assert len(rows) == 2 and all(0.0 < r["grade/error_frac"] <= 1.0 for r in rows)
