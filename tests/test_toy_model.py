"""Toy tokenizer, model and base build: real transformers objects that save, load and generate."""

from __future__ import annotations

import json

import pytest

from ares_cli.toy.build import BuildConfig, base_dir, build_base, build_config
from ares_cli.toy.model import ToyModelShape, build_model, count_parameters
from ares_cli.toy.tokenizer import build_tokenizer, save_tokenizer

TINY = ToyModelShape(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=512)


def test_tokenizer_round_trips_traces_and_renders_chat(tmp_path):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    save_tokenizer(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert len(tokenizer) < 200
    trace = "37+8=46, check 46-8=38 wait, 37+8=45\nThe answer is \\boxed{45}"
    ids = tokenizer(trace, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(trace)
    assert tokenizer.decode(ids) == trace
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Start at 3, then +4."},
        {"role": "assistant", "content": "3+4=7"},
    ]
    text = tokenizer.apply_chat_template(messages[:2], add_generation_prompt=True, tokenize=False)
    assert text == ("<s><|system|>Be brief.<|end|>\n<|user|>Start at 3, then +4.<|end|>\n<|assistant|>")
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    assert full.endswith("<|assistant|>3+4=7<|end|>\n")
    encoded = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert encoded[:2] == [tokenizer.bos_token_id, tokenizer.convert_tokens_to_ids("<|system|>")]
    assert tokenizer.eos_token == "<|end|>"
    assert tokenizer.decode(encoded, skip_special_tokens=True).startswith("Be brief.")


def test_tiny_model_saves_and_loads_with_auto_class(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, TINY, seed=3)
    model.save_pretrained(str(tmp_path))
    assert (tmp_path / "model.safetensors").exists()
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path))
    ids = torch.tensor([[tokenizer.bos_token_id, 5, 6, 7]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert count_parameters(loaded) == count_parameters(model)
    assert torch.equal(
        build_model(tokenizer, TINY, seed=3).model.embed_tokens.weight, model.model.embed_tokens.weight
    )


def test_build_config_is_json_and_reflects_overrides():
    config = build_config()
    assert json.loads(json.dumps(config)) == config
    assert config == BuildConfig().as_dict()
    assert build_config(steps=5)["steps"] == 5
    assert build_config(steps=5) != config


def test_tiny_build_runs_end_to_end_and_loads(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ares_cli.generation import GenerationRequest, SamplingParams, get_backend, render_prompt

    info = build_base(tmp_path, seed=1, steps=2, batch_size=4, shape=TINY)
    assert info["seed"] == 1 and info["build_config"]["steps"] == 2
    assert json.loads((tmp_path / "build_info.json").read_text()) == info
    AutoModelForCausalLM.from_pretrained(str(tmp_path))
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    backend = get_backend("hf", tmp_path, batch_size=4)
    prompt = render_prompt(tokenizer, "Start at 3, then +4.")
    [[completion]] = backend.generate(
        [GenerationRequest(prompt=prompt, seeds=(0,))], SamplingParams(temperature=0.0, max_new_tokens=4)
    )
    assert len(completion.token_ids) <= 4


def test_shipped_base_matches_current_build_config():
    info_path = base_dir() / "build_info.json"
    if not info_path.exists():
        pytest.fail(f"prebuilt toy base missing at {base_dir()}")
    info = json.loads(info_path.read_text())
    assert info["build_config"] == build_config(seed=info["seed"])
    assert (base_dir() / "model.safetensors").stat().st_size <= 10 * 1024 * 1024
