"""``ares plan rl`` on the PAEC recipe with the Qwen2.5-Math-1.5B shape twin at its full 28 layers (its
config.json, tokenizer and safetensors headers, no weights: ``tests/plan_models.py``): a full estimate on 8 x 80 GiB, a refusal with reasons
and suggestions on 1 x 24 GiB. The paper's validation budget (8192) exceeds the model's 4096-token
context, which ``ares rl`` refuses: the plan names it; the recipe as shipped validates with 3072 new tokens, as its rollouts, which fits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ares_cli.main import app

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
GIB = 2**30


@pytest.fixture(scope="module")
def qwen15(tmp_path_factory, qwen_tokenizer_json) -> Path:
    from plan_models import header_only_twin

    return header_only_twin(tmp_path_factory.mktemp("q15") / "model")


@pytest.fixture(scope="module")
def vl7b(tmp_path_factory, qwen_tokenizer_json) -> Path:
    from plan_models import header_only_twin

    return header_only_twin(tmp_path_factory.mktemp("vl7") / "model", name="qwen2.5-vl-7b")


def _plan(tmp_path, model, *extra, papers_val: bool = False) -> tuple[int, dict]:
    args = ["--artifacts-root", str(tmp_path), "--json", "plan", "rl", "--model", str(model), "--data", "toy-train",
            "--config", "pipelines/rl/paec-qwen2.5-math-1.5b.yaml", "--set", "data_limit=200", *extra]  # fmt: skip
    if papers_val:
        args += ["--set", "val.max_new_tokens=8192"]
    result = CliRunner().invoke(app, args)
    return result.exit_code, json.loads(result.stdout)


def test_paec_on_8x80_prints_a_full_estimate_and_fits(qwen15, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the recipe names pipelines/deepspeed/zero2.json relative to the repository
    code, report = _plan(tmp_path, qwen15, "--gpus", "8", "--gpu-memory", "80GiB")
    assert code == 0, report["verdict"]
    est = report["estimate"]
    names = {t["name"]: t for t in est["terms"]}
    assert names["weights + gradients + AdamW (ZeRO-2)"]["basis"] == "deepspeed"
    p = 1_543_714_304
    assert names["weights + gradients + AdamW (ZeRO-2)"]["bytes"] == 2 * p + 18 * p // 8
    assert names["reference model"]["bytes"] == 2 * p  # bf16, the policy's training dtype
    assert est["need_bytes"] <= est["budget_bytes"]
    assert {"activations", "head (fused)", "backward peak"} == {
        t["name"] for t in est["phases"]["policy update (forward + backward)"]
    }
    assert {"vLLM engine (awake)", "CUDA context + allocator slack"} <= set(
        names
    )  # the peak phase: the rollout
    assert (
        est["budget_bytes"] == 78 * GIB
    )  # 80 GiB less the sleeping engine's 2 GiB (rollout.sleep_mode auto)
    awake = est["phases"]["rollout (vLLM awake)"]
    assert [(t["name"], t["bytes"]) for t in awake] == [("vLLM engine (awake)", 38 * GIB)]  # 0.5 x 80 - 2
    assert [t["bytes"] for t in est["phases"]["weight sync"]] == [0, 2 * p]  # ZeRO-2: nothing gathered
    assert [t["name"] for t in est["engine"]["terms"]] == ["vLLM weights", "vLLM allowance", "vLLM KV cache"]
    assert est["tokens_per_step"] > 96 * 8 * 3072
    assert est["seconds_per_step"] is None  # no --throughput given
    assert report["facts"]["batch"]["prompts per rank"] == 12
    assert all(t["basis"] in ("exact", "estimate", "deepspeed", "assumed", "reserved") for t in est["terms"])


def test_paec_with_sleep_mode_off_keeps_the_engine_share_out_of_the_trainers_budget(
    qwen15, tmp_path, monkeypatch
):
    monkeypatch.chdir(REPO)
    code, report = _plan(
        tmp_path, qwen15, "--gpus", "8", "--gpu-memory", "80GiB", "--set", "rollout.sleep_mode=off"
    )
    est = report["estimate"]
    assert code == 0 and est["budget_bytes"] == 40 * GIB  # 80 GiB x (1 - vllm_gpu_memory_utilization 0.5)
    assert "rollout (vLLM awake)" not in est["phases"]
    assert [t["name"] for t in est["phases"]["weight sync"]] == [
        "sync transient"
    ]  # its weights are its share's


def test_ares_vl_7b_on_8x80_fits_with_every_term_of_the_sleeping_layout(vl7b, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    args = ["--artifacts-root", str(tmp_path), "--json", "plan", "rl", "--model", str(vl7b), "--data",
            "rehearse-vl-train", "--config", "pipelines/rl/ares-qwen2.5-vl-7b.yaml", "--gpus", "8", "--gpu-memory", "80GiB"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    report = json.loads(result.stdout)
    assert result.exit_code == 0, report["verdict"]
    est, world = report["estimate"], 8
    shapes = [_numel(s) for s in _twin_shapes("qwen2.5-vl-7b").values()]
    p, largest = sum(shapes), max(shapes)
    phases = {k: {t["name"]: t["bytes"] for t in v} for k, v in est["phases"].items()}
    assert phases["weight sync"] == {
        "sync transient": 2 * largest,
        "vLLM weights (awake for the sync)": 2 * p,
    }
    assert phases["start-up (load)"] == {"largest parameter whole while loading": 2 * largest}  # zero.Init
    assert phases["rollout (vLLM awake)"] == {"vLLM engine (awake)": 38 * GIB}
    terms = {t["name"]: t for t in est["terms"]}
    assert terms["reference model"]["bytes"] == 2 * p // world  # kl.reference auto = zero3 under ZeRO-3
    assert est["need_bytes"] <= est["budget_bytes"] == 78 * GIB
    update = phases["policy update (forward + backward)"]
    assert (
        update["vision tower activations"] > 0
        and phases["reference pass (no grad)"]["vision tower (no grad)"] > 0
    )
    assert "the vision tower's activations against measurement (an unmeasured formula)" in est["unchecked"]
    assert report["verdict"].startswith("fits on paper") and "not checked: " in report["verdict"]
    assert "ready" not in report["verdict"]


def _twin_shapes(name: str) -> dict[str, list[int]]:
    from plan_models import twin_tensors

    from ares_cli.rehearsal.twins import twin_spec

    return twin_tensors(name, twin_spec(name).full_layers)


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_paec_without_checkpointing_or_sleep_mode_does_not_fit_8x80_and_says_what_would(
    qwen15, tmp_path, monkeypatch
):
    monkeypatch.chdir(REPO)
    code, report = _plan(tmp_path, qwen15, "--gpus", "8", "--gpu-memory", "80GiB", "--set", "rollout.sleep_mode=off",
                         "--set", "optim.gradient_checkpointing=false")  # fmt: skip
    assert code == 5
    assert "activations" in report["estimate"]["reasons"][0]
    changes = {s["change"]: s for s in report["suggestions"]}
    assert changes["--set optim.gradient_checkpointing=true"]["fits"]
    assert all(s["fits"] for s in report["suggestions"])


def test_paec_on_one_24gib_gpu_will_not_fit_and_says_why(qwen15, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    code, report = _plan(tmp_path, qwen15, "--gpus", "1", "--gpu-memory", "24GiB")
    assert code == 5
    assert report["verdict"].startswith("will not fit")
    reason = report["estimate"]["reasons"][0]
    assert (
        "has 22.0 GiB" in reason and "weights + gradients + AdamW (ZeRO-2) 28.8 GiB" in reason
    )  # 20P on one GPU
    assert report["suggestions"]  # each with its new estimate
    assert all({"change", "fits", "need_gib", "budget_gib"} <= set(s) for s in report["suggestions"])


def test_time_per_step_from_a_throughput(qwen15, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    code, report = _plan(tmp_path, qwen15, "--gpus", "8", "--gpu-memory", "80GiB", "--throughput", "2000")
    est = report["estimate"]
    assert est["seconds_per_step"] == pytest.approx(est["tokens_per_step"] / (2000 * 8), rel=1e-3)
    assert report["target"]["throughput_source"] == "--throughput"


def test_the_papers_validation_budget_past_the_context_is_refused_as_the_stage_would(
    qwen15, tmp_path, monkeypatch
):
    monkeypatch.chdir(REPO)
    code, report = _plan(tmp_path, qwen15, "--gpus", "8", "--gpu-memory", "80GiB", papers_val=True)
    assert code == 2
    budget = next(c for c in report["checks"] if c["name"] == "generation budget")
    assert (
        budget["status"] == "fail" and "val.max_new_tokens" in budget["detail"] and "4096" in budget["detail"]
    )
    assert report["estimate"] is None


def test_the_vision_tower_term_from_the_headers_and_by_hand(vl7b):
    from dataclasses import replace

    from ares_cli.planning.memory import vision_tower_bytes
    from ares_cli.planning.shapes import read_model_shape

    shape = read_model_shape(str(vl7b))
    assert shape.vision == (1280, 3420, 28, 16, 2)  # the twin's vision_config (its blocks cut to 28 layers)
    tower = replace(shape, vision=(1280, 3420, 32, 16, 2))  # Qwen2.5-VL-7B's 32 blocks
    block = (
        2 * (4 * 1280 + 2 * 2 * 1280) + 2 * 5 * 1280 + 4 * 16 + 4 * 2 * 3420
    )  # norms, attention, SwiGLU MLP
    assert vision_tower_bytes(tower, 1000, 2, grad=True, checkpointing=True) == 1000 * (32 * 1280 * 2 + block)
    assert vision_tower_bytes(tower, 1000, 2, grad=True, checkpointing=False) == 1000 * 32 * block
    nograd = 1000 * (3 * 3420 * 2 + 2 * 1280 * 2 + 8 * 1280)
    assert vision_tower_bytes(tower, 1000, 2, grad=False, checkpointing=False) == nograd
    assert (
        vision_tower_bytes(replace(shape, vision=(0, 0, 0, 0, 1)), 1000, 2, grad=True, checkpointing=True)
        == 0
    )
