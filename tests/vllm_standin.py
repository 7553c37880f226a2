"""A strict stand-in for vLLM, built from the real signatures (tests/data/vllm_signatures.json, recorded from
the wheels of the supported range's bounds): unknown kwargs and parameter names are refused as the real
classes refuse them; the engine's model is reachable only in-process; a function sent to the engine is
refused as vLLM's serializer does; sleeping needs ``enable_sleep_mode`` and a sleeping engine refuses to
generate. ``install()`` puts it in ``sys.modules`` (a test's subprocess calls it before ares imports vllm).
"""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

SIGS = json.loads((Path(__file__).parent / "data" / "vllm_signatures.json").read_text())
WAKE_TAGS = ("weights", "kv_cache")  # what LLM.wake_up's docstring lists in both bounds


def _check(where, names, allowed):
    unknown = set(names) - set(allowed)
    if unknown:
        raise TypeError(f"{where} got an unexpected keyword argument {sorted(unknown)[0]!r}")


class StrictSamplingParams:
    def __init__(self, **kw):
        _check("SamplingParams", kw, SIGS["SamplingParams"])
        self.kw = kw


class StandInModel:
    """The engine's model: records what each load_weights call received (names and copies)."""

    def __init__(self):
        self.loaded, self.on_load = [], None

    def load_weights(self, weights):
        weights = list(weights)
        if self.on_load:
            self.on_load(weights)
        self.loaded.extend((n, t.detach().clone()) for n, t in weights)
        return {n for n, _ in weights}


class StrictLLM:
    """``instances`` collects every engine built in this process (tests read their ``kw`` and ``events``)."""

    instances: list = []

    def __init__(self, model, **kw):
        _check("LLM.__init__", kw, SIGS["LLM"])
        self.kw, self.calls, self.events = dict(model=model, **kw), [], []
        self.model = StandInModel()
        self.in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
        self.env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
        self.sleeping: set[str] = set()
        executor = SimpleNamespace(driver_worker=SimpleNamespace(worker=SimpleNamespace(
            model_runner=SimpleNamespace(model=self.model))))  # fmt: skip
        self.llm_engine = SimpleNamespace(reset_encoder_cache=lambda: self.events.append("encoder"))
        if self.in_process:
            self.llm_engine.model_executor = executor
        StrictLLM.instances.append(self)

    def _method(self, name, kw):
        _check(f"LLM.{name}", kw, SIGS["LLM_methods"][name])
        self.events.append(name)

    def get_tokenizer(self):
        if Path(str(self.kw["model"])).is_dir():
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(self.kw["model"]))
        return _Tok()

    def generate(self, prompts, sampling_params=None, **kw):
        self._method("generate", kw)
        if self.sleeping:
            raise RuntimeError(f"generate on a sleeping engine ({sorted(self.sleeping)} released)")
        self.calls.append((prompts, sampling_params))
        outs = []
        for p, sp in zip(prompts, sampling_params, strict=True):
            comps = []
            for i in range(sp.kw.get("n", 1)):
                toks = [(sp.kw["seed"] + i) % 50 + 3]
                lps = [{toks[0]: SimpleNamespace(logprob=-0.5)}]
                comps.append(SimpleNamespace(text=f"s{sp.kw['seed']}.{i}", token_ids=tuple(toks),
                                             finish_reason="stop", logprobs=lps))  # fmt: skip
            outs.append(SimpleNamespace(prompt_token_ids=p.get("prompt_token_ids"), outputs=comps))
        return outs

    def apply_model(self, func):
        if not self.in_process and os.environ.get("VLLM_ALLOW_INSECURE_SERIALIZATION") != "1":
            raise TypeError(
                "Object of type function is not serializable; set VLLM_ALLOW_INSECURE_SERIALIZATION=1"
            )
        return [func(self.model)]

    def reset_prefix_cache(self, **kw):
        self._method("reset_prefix_cache", kw)

    def reset_mm_cache(self, **kw):
        self._method("reset_mm_cache", kw)

    def sleep(self, **kw):
        self._method("sleep", kw)
        if not self.kw.get("enable_sleep_mode"):
            raise ValueError("Sleep mode is not enabled (build the engine with enable_sleep_mode=True)")
        if kw.get("level", 1) not in (1, 2):
            raise ValueError(f"sleep level {kw.get('level')} (vLLM has 1 and 2)")
        self.sleeping = set(WAKE_TAGS)
        self.events[-1] = f"sleep(level={kw.get('level', 1)})"

    def wake_up(self, **kw):
        self._method("wake_up", kw)
        tags = kw.get("tags") or list(WAKE_TAGS)
        if set(tags) - set(WAKE_TAGS):
            raise ValueError(f"wake_up tags {tags} (vLLM has {WAKE_TAGS})")
        self.sleeping -= set(tags)
        self.events[-1] = f"wake_up({','.join(tags)})"


class _Tok:
    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [len(w) for w in text.split()]}

    eos_token_id = None

    def convert_tokens_to_ids(self, t):
        return None


def module() -> types.ModuleType:
    mod = types.ModuleType("vllm")
    mod.LLM, mod.SamplingParams = StrictLLM, StrictSamplingParams
    return mod


def install() -> types.ModuleType:
    """The stand-in as ``vllm`` in this process, with a fresh list of engines."""
    sys.modules["vllm"] = mod = module()
    StrictLLM.instances.clear()
    return mod
