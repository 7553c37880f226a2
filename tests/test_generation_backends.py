"""Backend selection, seeds, the replay backend, and the vllm backend's wiring against a stand-in module."""

from __future__ import annotations

import json
import sys
import types
from types import SimpleNamespace

import pytest

from ares_cli.errors import InputError, UsageError
from ares_cli.generation import (
    Completion,
    GenerationRequest,
    SamplingParams,
    get_backend,
    resolve_backend_name,
    seed_for,
)


def test_import_is_cheap():
    import subprocess

    code = "import sys, ares_cli.generation; print(sorted(m for m in ('torch','transformers','vllm') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_seed_for_is_stable_and_63_bit():
    assert seed_for(0, "p1", 0) == seed_for(0, "p1", 0)
    # pinned value: must never change across versions, or resumed runs would regenerate different text
    assert seed_for(1234, "math500/17", 3) == 4906651635564353048
    seeds = {seed_for(b, p, i) for b in (0, 1) for p in ("a", "b", "ab") for i in range(5)}
    assert len(seeds) == 30 and all(0 <= s < 2**63 for s in seeds)
    assert seed_for(0, "a", 12) != seed_for(0, "a1", 2)


def test_sampling_params_validation():
    with pytest.raises(TypeError):
        SamplingParams()  # max_new_tokens has no default
    for bad in (
        dict(max_new_tokens=0),
        dict(max_new_tokens=5, temperature=-1),
        dict(max_new_tokens=5, top_p=0),
    ):
        with pytest.raises(UsageError):
            SamplingParams(**bad)
    assert SamplingParams(max_new_tokens=3, stop=["x"]).stop == ("x",)
    assert GenerationRequest("p", seeds=[1, 2]).seeds == (1, 2)
    with pytest.raises(UsageError):
        GenerationRequest("p", seeds=(-1,))


def test_completion_n_tokens():
    assert Completion("ab", [1, 2], "stop").n_tokens == 2
    assert Completion("ab", [], "length", token_count=9).n_tokens == 9


def test_backend_names(monkeypatch):
    with pytest.raises(UsageError, match="unknown generation backend"):
        get_backend("tgi", None)
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail
    with pytest.raises(UsageError, match="vllm"):
        get_backend("vllm", "some/model")


def test_auto_prefers_vllm_only_with_cuda(monkeypatch):
    import importlib.util

    import ares_cli.generation as gen

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "vllm" else real(n, *a))
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_backend_name("auto") == "hf"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_backend_name("auto") == "vllm"
    assert gen.resolve_backend_name("replay") == "replay"


# ---------------------------------------------------------------- replay


def write_jsonl(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_replay_serves_rows_in_seed_order(tmp_path):
    f = write_jsonl(
        tmp_path / "c.jsonl",
        [
            {"problem_id": "p1", "sample_idx": 1, "response": "B", "finish_reason": "length", "n_tokens": 4},
            {"problem_id": "p1", "sample_idx": 0, "response": "A"},
            {"problem_id": "p2", "sample_idx": 0, "response": "C", "n_tokens": 2},
        ],
    )
    b = get_backend("replay", f)
    out = b.generate(
        [GenerationRequest("x", seeds=(7, 8), key="p1"), GenerationRequest("y", seeds=(9,), key="p2")],
        SamplingParams(max_new_tokens=5),
    )
    assert [[c.text for c in r] for r in out] == [["A", "B"], ["C"]]
    assert [c.finish_reason for c in out[0]] == ["stop", "length"]
    assert out[0][1].n_tokens == 4 and out[1][0].n_tokens == 2 and out[0][0].token_ids == []
    assert get_backend("replay", None, path=f).generate([], SamplingParams(max_new_tokens=1)) == []


def test_replay_missing_row_names_file_and_key(tmp_path):
    f = write_jsonl(tmp_path / "c.jsonl", [{"problem_id": "p1", "sample_idx": 0, "response": "A"}])
    with pytest.raises(InputError) as e:
        get_backend("replay", f).generate(
            [GenerationRequest("x", seeds=(1, 2), key="p1")], SamplingParams(max_new_tokens=1)
        )
    assert str(f) in str(e.value) and "'p1'" in str(e.value) and "sample_idx=1" in str(e.value)
    with pytest.raises(UsageError):
        get_backend("replay", f).generate(
            [GenerationRequest("x", seeds=(1,))], SamplingParams(max_new_tokens=1)
        )


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("{not json", None),
        ('["a list"]', None),
        ('{"sample_idx": 0, "response": "A"}', "problem_id"),
        ('{"problem_id": "p", "sample_idx": "0", "response": "A"}', "sample_idx"),
        ('{"problem_id": "p", "sample_idx": 0}', "response"),
        ('{"problem_id": "p", "sample_idx": 0, "response": "A", "finish_reason": "abort"}', "finish_reason"),
        ('{"problem_id": "p", "sample_idx": 0, "response": "A", "n_tokens": -1}', "n_tokens"),
        ('{"problem_id": "p0", "sample_idx": 0, "response": "dup"}', None),
    ],
)
def test_replay_malformed_rows(tmp_path, line, field):
    f = write_jsonl(
        tmp_path / "c.jsonl", ['{"problem_id": "p0", "sample_idx": 0, "response": "A"}', "", line]
    )
    with pytest.raises(InputError) as e:
        get_backend("replay", f)
    assert e.value.row == 3 and e.value.field == field and e.value.file == str(f)


def test_replay_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        get_backend("replay", tmp_path / "nope.jsonl")
    with pytest.raises(UsageError):
        get_backend("replay", None)


# ---------------------------------------------------------------- vllm (stand-in module)


class FakeSamplingParams:
    def __init__(self, **kw):
        self.kw = kw


class FakeTokenizer:
    def __call__(self, text, add_special_tokens=True):
        assert add_special_tokens is False
        return {"input_ids": [len(w) for w in text.split()]}


class FakeLLM:
    instances: list[FakeLLM] = []

    def __init__(self, **kw):
        self.kw, self.calls, self.applied, self.resets = kw, [], [], 0
        FakeLLM.instances.append(self)

    def get_tokenizer(self):
        return FakeTokenizer()

    def generate(self, prompts, params, use_tqdm=True):
        self.calls.append((prompts, params, use_tqdm))
        outs = []
        for p, sp in zip(prompts, params, strict=True):
            seed = sp.kw["seed"]
            toks = [seed % 50, (seed + 1) % 50]
            reason = "length" if seed % 2 else "stop"
            lps = [{t: SimpleNamespace(logprob=-0.5 * (i + 1))} for i, t in enumerate(toks)]
            comp = SimpleNamespace(text=f"s{seed}", token_ids=tuple(toks), finish_reason=reason, logprobs=lps)
            outs.append(SimpleNamespace(prompt_token_ids=p.get("prompt_token_ids"), outputs=[comp]))
        return outs

    def apply_model(self, func):
        model = SimpleNamespace(loaded=[])
        model.load_weights = lambda weights: model.loaded.extend(weights)
        func(model)
        self.applied.append(model.loaded)
        return [None]

    def reset_prefix_cache(self):
        self.resets += 1


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.LLM, mod.SamplingParams = FakeLLM, FakeSamplingParams
    monkeypatch.setitem(sys.modules, "vllm", mod)
    FakeLLM.instances.clear()
    return mod


def test_vllm_engine_and_sampling_wiring(fake_vllm):
    b = get_backend(
        "vllm",
        "/models/m",
        seed=3,
        tensor_parallel_size=2,
        gpu_memory_utilization=0.5,
        dtype="bfloat16",
        per_sample_seeds=True,
    )
    llm = FakeLLM.instances[-1]
    assert llm.kw == dict(
        model="/models/m",
        seed=3,
        enable_prefix_caching=True,
        tensor_parallel_size=2,
        gpu_memory_utilization=0.5,
        dtype="bfloat16",
    )
    reqs = [
        GenerationRequest("ab cde", seeds=(10, 11, 12), key="p1"),
        GenerationRequest("x", seeds=(7,), key="p2"),
    ]
    sp = SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=321, stop=("</answer>",))
    out = b.generate(reqs, sp)
    [(prompts, params, use_tqdm)] = llm.calls
    assert use_tqdm is False
    assert prompts == [{"prompt_token_ids": [2, 3]}] * 3 + [{"prompt_token_ids": [1]}]
    assert [p.kw["seed"] for p in params] == [10, 11, 12, 7]
    for p in params:
        assert p.kw == dict(
            n=1,
            seed=p.kw["seed"],
            temperature=0.6,
            top_p=0.95,
            max_tokens=321,
            stop=["</answer>"],
            logprobs=0,
        )
    assert [[c.text for c in r] for r in out] == [["s10", "s11", "s12"], ["s7"]]
    assert [c.finish_reason for c in out[0]] == ["stop", "length", "stop"]
    assert out[0][0].token_ids == [10, 11] and out[0][0].logprobs == [-0.5, -1.0]


def test_vllm_without_logprobs_and_bad_finish(fake_vllm, monkeypatch):
    from ares_cli.errors import StageFailure

    b = get_backend("vllm", "m", logprobs=False)
    [[c]] = b.generate([GenerationRequest("a", seeds=(2,))], SamplingParams(max_new_tokens=4))
    assert c.logprobs is None and FakeLLM.instances[-1].calls[0][1][0].kw["logprobs"] is None
    aborted = SimpleNamespace(text="", token_ids=(), finish_reason="abort", logprobs=None)
    monkeypatch.setattr(
        FakeLLM, "generate", lambda self, p, s, use_tqdm=True: [SimpleNamespace(outputs=[aborted])]
    )
    with pytest.raises(StageFailure, match="abort"):
        b.generate([GenerationRequest("a", seeds=(2,))], SamplingParams(max_new_tokens=4))


# the weight sync is tested against the strict stand-in in tests/test_vllm_contract.py


def test_vllm_images_go_as_multi_modal_data(fake_vllm, tmp_path):
    from PIL import Image

    from ares_cli.errors import InputError

    paths = []
    for i, size in enumerate([(28, 28), (56, 42)]):
        paths.append(str(tmp_path / f"{i}.png"))
        Image.new("RGB", size, (i * 100, 0, 0)).save(paths[-1])
    b = get_backend("vllm", "m", max_images=2, min_pixels=784, max_pixels=3136, per_sample_seeds=True)
    llm = FakeLLM.instances[-1]
    assert llm.kw["limit_mm_per_prompt"] == {"image": 2}
    assert llm.kw["mm_processor_kwargs"] == {"min_pixels": 784, "max_pixels": 3136}
    reqs = [GenerationRequest("<img> <img> what", seeds=(4, 5), key="v", images=tuple(paths)),
            GenerationRequest("ab c", seeds=(6,), key="t")]  # fmt: skip
    out = b.generate(reqs, SamplingParams(max_new_tokens=3))
    [(prompts, params, _)] = llm.calls
    assert prompts[0] is prompts[1] and prompts[0]["prompt"] == "<img> <img> what"
    images = prompts[0]["multi_modal_data"]["image"]
    assert [im.size for im in images] == [(28, 28), (56, 42)] and images[1].getpixel((0, 0)) == (100, 0, 0)
    assert prompts[2] == {"prompt_token_ids": [2, 1]}
    assert [p.kw["seed"] for p in params] == [4, 5, 6] and [len(r) for r in out] == [2, 1]
    assert all("<|image_pad|>" in p.kw["bad_words"] for p in params)  # vision tokens are never sampled
    text_only = get_backend("vllm", "m")
    assert "limit_mm_per_prompt" not in FakeLLM.instances[-1].kw
    with pytest.raises(InputError, match="at most 0"):
        text_only.generate(reqs[:1], SamplingParams(max_new_tokens=3))


def test_unknown_option_is_usage_error():
    with pytest.raises(UsageError):
        get_backend("hf", "m", not_an_option=1)
