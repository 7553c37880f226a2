"""The vllm backend against the real vLLM: the wheels of the supported range's bounds read by ``ast``
(`make vllm-contract-wheels`; skipped without them), and a strict stand-in built from their signatures."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from tests import vllm_contract as vc
from tests import vllm_standin
from tests.vllm_standin import StrictLLM, StrictSamplingParams

ROOT = Path(__file__).resolve().parents[1]
BACKEND = ROOT / "ares_cli" / "generation" / "vllm_backend.py"
SIGS = json.loads(vc.SIGNATURES.read_text())

# the vLLM type behind each attribute hop ares takes from `self.llm`
HOPS = {
    ("LLM", "llm_engine"): ["LLMEngine"],
    ("LLMEngine", "model_executor"): ["UniProcExecutor", "ExecutorWithExternalLauncher"],
    ("UniProcExecutor", "driver_worker"): ["WorkerWrapperBase"],
    ("ExecutorWithExternalLauncher", "driver_worker"): ["WorkerWrapperBase"],
    ("WorkerWrapperBase", "worker"): ["Worker"],
    ("Worker", "model_runner"): ["GPUModelRunner"],
    ("GPUModelRunner", "model"): ["Qwen2ForCausalLM", "Qwen2_5_VLForConditionalGeneration"],
}
OUTPUT_VARS = {"output": "RequestOutput", "comp": "CompletionOutput"}  # names ares gives vLLM's outputs


def _chain(node):
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return (node.id, names[::-1]) if isinstance(node, ast.Name) else (None, [])


def ares_uses():
    """By AST from the backend: LLM kwargs, SamplingParams kwargs, `self.llm...` chains (with the kwargs of
    the call they end in), attributes read off vLLM's outputs. A new use is checked without editing this."""
    tree = ast.parse(BACKEND.read_text())
    llm_kw, sp_kw, chains, outputs = set(), set(), [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "SamplingParams":
                sp_kw |= {k.arg for k in node.keywords if k.arg}
                for k in node.keywords:  # **({"bad_words": ...} if ... else {})
                    for d in ast.walk(k.value) if k.arg is None else ():
                        if isinstance(d, ast.Dict):
                            sp_kw |= {c.value for c in d.keys if isinstance(c, ast.Constant)}
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            llm_kw |= {k.arg for k in node.keywords if k.arg}  # kwargs: dict[str, Any] = dict(...)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "kwargs":
            if isinstance(node.slice, ast.Constant):
                llm_kw.add(node.slice.value)
        if isinstance(node, ast.Attribute):
            root, names = _chain(node)
            if root in OUTPUT_VARS:
                outputs.add((OUTPUT_VARS[root], names[0]))
            if root == "self" and names[:1] == ["llm"] and len(names) > 1:
                chains.append(names[1:])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            root, names = _chain(node.func)
            if root == "self" and names[:1] == ["llm"]:
                chains.append(names[1:] + [tuple(k.arg for k in node.keywords if k.arg)])
    for node in ast.walk(tree):  # model.load_weights(weights=...) on the engine's model
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "load_weights"
        ):
            if _chain(node.func)[0] == "model":
                chains.append(["<model>", "load_weights", tuple(k.arg for k in node.keywords)])
    return llm_kw, sp_kw, chains, outputs


def _bound(version):
    if vc.wheel_path(version) is None:
        pytest.skip(f"vllm {version} wheel not in {vc.WHEEL_DIR}; run `make vllm-contract-wheels`")
    return version


@pytest.fixture(params=vc.BOUNDS)
def wheel(request):
    return _bound(request.param)


def test_every_kwarg_field_and_attribute_ares_uses_exists(wheel):
    llm_kw, sp_kw, chains, outputs = ares_uses()
    assert {"model", "enable_prefix_caching", "distributed_executor_backend"} <= llm_kw  # the collector works
    assert {"n", "seed", "max_tokens", "bad_words"} <= sp_kw and ("CompletionOutput", "token_ids") in outputs
    assert llm_kw - vc.llm_kwargs(wheel) == set()
    assert sp_kw - vc.fields(wheel, "SamplingParams") == set()
    for cls, attr in outputs:
        assert attr in vc.fields(wheel, cls) | vc.members(wheel, cls), (cls, attr)
    assert vc.fields(wheel, "Logprob") >= {"logprob"}
    for chain in chains:
        kw = chain[-1] if isinstance(chain[-1], tuple) else None
        hops = chain[:-1] if kw is not None else chain
        types_now = (
            ["Qwen2ForCausalLM", "Qwen2_5_VLForConditionalGeneration"] if hops[0] == "<model>" else ["LLM"]
        )
        hops = hops[1:] if hops[0] == "<model>" else hops
        for i, attr in enumerate(hops):
            for t in types_now:
                assert attr in vc.members(wheel, t), f"vllm {wheel}: {t} has no {attr!r} (ares uses {chain})"
            last = i == len(hops) - 1
            if last and kw is not None:
                for t in types_now:
                    params = vc.methods(wheel, t)[attr]
                    assert set(kw) <= set(params) or "**" in params, (t, attr, kw, params)
            elif not last:
                nxt = {n for t in types_now for n in HOPS.get((t, attr), [])}
                assert nxt, f"no contract type for {types_now}.{attr}: add it to HOPS (a new use of vLLM)"
                types_now = sorted(nxt)


def test_executor_placement_reads_the_launchers_rank(wheel):
    src = vc.source(wheel, vc.CLASSES["ExecutorWithExternalLauncher"])
    node = vc.class_node(wheel, "ExecutorWithExternalLauncher")
    body = ast.get_source_segment(src, node)
    assert 'os.environ["LOCAL_RANK"]' in body and 'os.environ["RANK"]' in body
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" in body  # the in-process requirement ares satisfies
    assert '"external_launcher"' in vc.source(wheel, "vllm/config/parallel.py")


def test_serialization_gate_refuses_functions(wheel):
    """vLLM pickles a function for a worker process only with VLLM_ALLOW_INSECURE_SERIALIZATION: ares never
    sends one (no apply_model / collective_rpc with a callable)."""
    assert "VLLM_ALLOW_INSECURE_SERIALIZATION" in vc.source(wheel, "vllm/v1/serial_utils.py")
    assert "apply_model" in vc.members(wheel, "LLM")
    tree = ast.parse(BACKEND.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("apply_model", "collective_rpc"):
            pytest.fail(
                f"vllm_backend.py line {node.lineno} calls {node.attr}: a function sent to the engine"
            )


def test_sync_entry_point_and_cache_resets_exist(wheel):
    for cls in ("Qwen2ForCausalLM", "Qwen2_5_VLForConditionalGeneration"):
        assert vc.methods(wheel, cls)["load_weights"] == ["weights"]
    assert {"reset_prefix_cache", "reset_mm_cache", "sleep", "wake_up"} <= set(vc.methods(wheel, "LLM"))
    assert "reset_encoder_cache" in vc.methods(wheel, "LLMEngine")
    assert "enable_sleep_mode" in vc.fields(wheel, "EngineArgs")
    assert vc.methods(wheel, "LLM")["sleep"][0] == "level" and vc.methods(wheel, "LLM")["wake_up"] == ["tags"]
    tags = ast.get_docstring(
        next(n for n in vc.class_node(wheel, "LLM").body if getattr(n, "name", "") == "wake_up")
    )
    assert '"weights"' in tags and '"kv_cache"' in tags


def test_sleep_level_1_keeps_the_weights_for_a_wake_up(wheel):
    """ares sleeps at level 1 (weights to CPU memory, KV cache dropped): buffers that a sync does not send
    (rotary caches) survive; level 2 drops them. The tags ares wakes are the allocator's own."""
    doc = " ".join(ast.get_docstring(
        next(n for n in vc.class_node(wheel, "LLM").body if getattr(n, "name", "") == "sleep")).split())  # fmt: skip
    assert re.search(r"Level 1(:| sleep will) offload (the )?model weights", doc, re.I), doc[:300]
    assert "discard" in doc and "kv cache" in doc.lower()
    used = set(re.findall(r'"(weights|kv_cache)"', BACKEND.read_text()))
    worker = vc.source(wheel, "vllm/v1/worker/gpu_worker.py")  # the memory pools the worker tags
    assert used == {"weights", "kv_cache"} and all(f'tag="{t}"' in worker for t in used)


def test_recorded_signatures_match_the_wheels():
    for v in vc.BOUNDS:
        _bound(v)
    assert vc.record() == SIGS, "regenerate: .venv/bin/python -m tests.vllm_contract record"


# ---------------------------------------------------------------- the strict stand-in (tests/vllm_standin.py)


@pytest.fixture
def strict_vllm(monkeypatch):
    mod = vllm_standin.module()
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    StrictLLM.instances.clear()
    return mod


def test_stand_in_rejects_unknown_kwargs(strict_vllm):
    with pytest.raises(TypeError, match="unexpected keyword argument 'not_a_vllm_arg'"):
        StrictLLM("m", not_a_vllm_arg=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_new_tokens'"):
        StrictSamplingParams(max_new_tokens=3)


def _backend(**kw):
    from ares_cli.generation.vllm_backend import VLLMBackend

    return VLLMBackend("m", **kw)


def test_each_rank_builds_an_in_process_engine_bound_to_it(strict_vllm, monkeypatch):
    import os

    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    _backend(seed=10, tensor_parallel_size=2)
    llm = StrictLLM.instances[-1]
    assert llm.kw["distributed_executor_backend"] == "external_launcher"
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and llm.in_process
    assert llm.kw["tensor_parallel_size"] == 2 and llm.kw["data_parallel_size"] == 2
    assert llm.kw["seed"] == 11  # ranks 2 and 3 form one tensor-parallel group: one seed


def test_single_process_keeps_the_default_executor(strict_vllm, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    _backend()
    assert "distributed_executor_backend" not in StrictLLM.instances[-1].kw


def test_sync_goes_in_process_one_parameter_per_call_and_resets_caches(strict_vllm):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    b = _backend(max_images=1, sleep_mode=True)
    llm = StrictLLM.instances[-1]
    sizes = []
    llm.model.on_load = lambda w: (sizes.append(len(w)), llm.events.append("load"))
    b.sleep()
    b.sync_weights(model)
    assert [n for n, _ in llm.model.loaded] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert sizes == [1] * 4
    assert torch.equal(llm.model.loaded[0][1], model[0].weight)
    assert llm.events == ["sleep(level=1)", "wake_up(weights)", *["load"] * 4, "wake_up(kv_cache)",
                          "reset_prefix_cache", "reset_mm_cache", "encoder"]  # fmt: skip
    llm.events.clear()
    b.sync_weights(model)  # an awake engine is not woken again
    assert "wake_up(weights)" not in llm.events and llm.events[-3:] == ["reset_prefix_cache", "reset_mm_cache",
                                                                         "encoder"]  # fmt: skip


def test_sleep_needs_sleep_mode_and_a_sleeping_engine_is_woken_to_generate(strict_vllm):
    from ares_cli.generation.types import GenerationRequest, SamplingParams

    with pytest.raises(ValueError, match="Sleep mode is not enabled"):
        StrictLLM("m").sleep(level=1)  # the stand-in is as strict as vLLM's allocator
    off = _backend()
    off.sleep()  # without sleep mode ares never calls LLM.sleep
    assert "sleep(level=1)" not in StrictLLM.instances[-1].events
    b = _backend(sleep_mode=True)
    llm = StrictLLM.instances[-1]
    assert llm.kw["enable_sleep_mode"] is True
    b.sleep()
    b.generate([GenerationRequest("a b", seeds=(1,))], SamplingParams(max_new_tokens=2))
    assert llm.events == ["sleep(level=1)", "wake_up(weights,kv_cache)", "generate"]


def test_a_missing_cache_reset_fails_loudly(strict_vllm, monkeypatch):
    from ares_cli.errors import StageFailure

    torch = pytest.importorskip("torch")
    monkeypatch.delattr(StrictLLM, "reset_prefix_cache")
    with pytest.raises(StageFailure, match="reset_prefix_cache"):
        _backend().sync_weights(torch.nn.Linear(2, 2))


def test_default_sampling_is_one_request_per_prompt_with_n(strict_vllm):
    from ares_cli.generation.types import GenerationRequest, SamplingParams

    b = _backend()
    out = b.generate([GenerationRequest("ab c", seeds=(5, 6, 7))], SamplingParams(max_new_tokens=3))
    [(prompts, params)] = StrictLLM.instances[-1].calls
    assert len(prompts) == 1 and params[0].kw["n"] == 3 and params[0].kw["seed"] == 5
    assert [c.text for c in out[0]] == ["s5.0", "s5.1", "s5.2"]
    _backend(per_sample_seeds=True).generate(
        [GenerationRequest("a", seeds=(5, 6))], SamplingParams(max_new_tokens=3)
    )
    [(prompts, params)] = StrictLLM.instances[-1].calls
    assert [p.kw["seed"] for p in params] == [5, 6] and all(p.kw["n"] == 1 for p in params)
