"""Read a vLLM wheel's sources by ``ast`` (nothing imported): class members, call signatures, fields.

Regenerate the strict stand-in's signatures (tests/data/vllm_signatures.json) after changing the range:
    make vllm-contract-wheels && .venv/bin/python -m tests.vllm_contract record
"""

from __future__ import annotations

import ast
import json
import sys
import zipfile
from functools import cache
from pathlib import Path

WHEEL_DIR = Path.home() / ".cache" / "ares" / "vllm-wheels"
BOUNDS = ("0.16.0", "0.34.0")  # the `vllm` extra's range in pyproject.toml
SIGNATURES = Path(__file__).parent / "data" / "vllm_signatures.json"

# where each class that ares touches lives (the same module in every release of the range)
CLASSES = {
    "LLM": "vllm/entrypoints/llm.py",
    "EngineArgs": "vllm/engine/arg_utils.py",
    "SamplingParams": "vllm/sampling_params.py",
    "RequestOutput": "vllm/outputs.py",
    "CompletionOutput": "vllm/outputs.py",
    "Logprob": "vllm/logprobs.py",
    "LLMEngine": "vllm/v1/engine/llm_engine.py",
    "UniProcExecutor": "vllm/v1/executor/uniproc_executor.py",
    "ExecutorWithExternalLauncher": "vllm/v1/executor/uniproc_executor.py",
    "WorkerWrapperBase": "vllm/v1/worker/worker_base.py",
    "Worker": "vllm/v1/worker/gpu_worker.py",
    "GPUModelRunner": "vllm/v1/worker/gpu/model_runner.py",
    "Qwen2ForCausalLM": "vllm/model_executor/models/qwen2.py",
    "Qwen2_5_VLForConditionalGeneration": "vllm/model_executor/models/qwen2_5_vl.py",
}


def wheel_path(version: str) -> Path | None:
    found = sorted(WHEEL_DIR.glob(f"vllm-{version}-*.whl"))
    return found[0] if found else None


@cache
def source(version: str, path: str) -> str:
    with zipfile.ZipFile(wheel_path(version)) as z:
        return z.read(path).decode()


@cache
def class_node(version: str, name: str) -> ast.ClassDef:
    tree = ast.parse(source(version, CLASSES[name]))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"vllm {version}: no class {name} in {CLASSES[name]}")


def methods(version: str, name: str) -> dict[str, list[str]]:
    """Method name -> its parameter names (self dropped; '**' marks a **kwargs catch-all)."""
    out = {}
    for node in class_node(version, name).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs][1:]
            out[node.name] = names + (["**"] if a.kwarg else [])
    return out


def members(version: str, name: str) -> set[str]:
    """Methods, class-level fields and every ``self.X`` assigned in the class (and its in-file bases)."""
    cls = class_node(version, name)
    found = set(methods(version, name))
    for node in ast.walk(cls):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                found.add(t.attr)
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in CLASSES and CLASSES[base.id] == CLASSES[name]:
            found |= members(version, base.id)
    return found


def fields(version: str, name: str) -> set[str]:
    """Annotated class-level fields (dataclass / msgspec struct fields)."""
    return {
        n.target.id
        for n in class_node(version, name).body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


def llm_kwargs(version: str) -> set[str]:
    """What ``LLM(...)`` accepts: its own parameters, and EngineArgs fields through ``**kwargs``."""
    return set(methods(version, "LLM")["__init__"]) - {"**"} | fields(version, "EngineArgs")


def record() -> dict:
    """The signatures common to both bounds: what the strict stand-in accepts."""
    sigs = []
    for v in BOUNDS:
        llm = methods(v, "LLM")
        sigs.append({
            "LLM": sorted(llm_kwargs(v)),
            "SamplingParams": sorted(fields(v, "SamplingParams")),
            "LLM_methods": {m: [p for p in llm[m] if p != "**"] for m in
                            ("generate", "get_tokenizer", "reset_prefix_cache", "reset_mm_cache", "sleep",
                             "wake_up", "collective_rpc", "apply_model")},
            "load_weights": methods(v, "Qwen2ForCausalLM")["load_weights"],
        })  # fmt: skip
    lo, hi = sigs
    return {
        "versions": list(BOUNDS),
        "LLM": sorted(set(lo["LLM"]) & set(hi["LLM"])),
        "SamplingParams": sorted(set(lo["SamplingParams"]) & set(hi["SamplingParams"])),
        "LLM_methods": {
            m: [p for p in lo["LLM_methods"][m] if p in hi["LLM_methods"][m]] for m in lo["LLM_methods"]
        },
        "load_weights": [p for p in lo["load_weights"] if p in hi["load_weights"]],
    }


if __name__ == "__main__" and sys.argv[1:] == ["record"]:
    SIGNATURES.write_text(json.dumps(record(), indent=1) + "\n")
    print(f"wrote {SIGNATURES}")
