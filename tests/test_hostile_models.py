"""Hostile model directories (issue 34, part 1), through the CLI: a lying ``config.json``, a lying
safetensors header, weights that are not a regular file. Each is refused by ``ares plan`` and the stages
with exit 3 and an ``error:`` line naming the file and the field or tensor, never a traceback, a hang or
a plan built on it; the valid tiny models beside them still plan.

Each directory is the toy base model (``ares_cli/toy/base``) with one thing changed. In-process calls run
under an alarm (:class:`ModelInputHang`, the tally's ``hang``); the FIFO, directory and sparse-file cases
also run in a fresh interpreter that the kernel kills 5 s after its imports (``SIGALRM`` left at its
default action), so a refusal slower than that fails the test.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_model_dirs import (  # noqa: F401  (the builders; ModelInputHang names the tally's hang)
    DROP,
    GIB,
    HANG_AFTER_S,
    REFUSED_WITHIN_S,
    REPO,
    SIDE,
    TOY,
    VL,
    ModelInputHang,
    _all_in,
    _ares,
    _config_file,
    _index,
    _weights_file,
    assert_refused,
    edited,
    header_bytes,
    model_dir,
    plan_eval,
    toy_config,
    toy_tensors,
    write_weights,
)
from input_rows import one_plus_one, write_jsonl

# ------------------------------------------------------------------ config.json fields (exit 3, field)

CONFIG_BAD = [
    ("heads-zero", edited(num_attention_heads=0), "num_attention_heads"),
    ("heads-negative", edited(num_attention_heads=-4), "num_attention_heads"),
    ("heads-float", edited(num_attention_heads=4.0), "num_attention_heads"),
    ("heads-string", edited(num_attention_heads="4"), "num_attention_heads"),
    ("heads-bool", edited(num_attention_heads=True), "num_attention_heads"),
    ("heads-null", edited(num_attention_heads=None), "num_attention_heads"),
    ("heads-missing", edited(num_attention_heads=DROP), "num_attention_heads"),
    ("heads-huge", edited(num_attention_heads=10**6), "num_attention_heads"),
    ("layers-zero", edited(num_hidden_layers=0), "num_hidden_layers"),
    ("layers-float", edited(num_hidden_layers=4.5), "num_hidden_layers"),
    ("layers-string", edited(num_hidden_layers="4"), "num_hidden_layers"),
    ("layers-negative", edited(num_hidden_layers=-1), "num_hidden_layers"),
    ("layers-huge", edited(num_hidden_layers=10**7), "num_hidden_layers"),
    ("layers-list", edited(num_hidden_layers=[4]), "num_hidden_layers"),
    ("hidden-float", edited(hidden_size=128.0), "hidden_size"),
    ("hidden-string", edited(hidden_size="128"), "hidden_size"),
    ("hidden-zero", edited(hidden_size=0), "hidden_size"),
    ("hidden-huge", edited(hidden_size=10**9), "hidden_size"),
    (
        "hidden-not-divisible",
        edited(num_attention_heads=3, num_key_value_heads=3, head_dim=DROP),
        "hidden_size",
    ),
    ("kv-heads-not-dividing", edited(num_key_value_heads=3), "num_key_value_heads"),
    ("kv-heads-zero", edited(num_key_value_heads=0), "num_key_value_heads"),
    ("kv-heads-float", edited(num_key_value_heads=2.0), "num_key_value_heads"),
    ("vocab-zero", edited(vocab_size=0), "vocab_size"),
    ("vocab-string", edited(vocab_size="92"), "vocab_size"),
    ("vocab-huge", edited(vocab_size=10**12), "vocab_size"),
    ("intermediate-negative", edited(intermediate_size=-384), "intermediate_size"),
    ("intermediate-missing", edited(intermediate_size=DROP), "intermediate_size"),
    ("head-dim-zero", edited(head_dim=0), "head_dim"),
    ("head-dim-float", edited(head_dim=32.0), "head_dim"),
    ("context-10e12", edited(max_position_embeddings=10**12), "max_position_embeddings"),
    ("context-float", edited(max_position_embeddings=640.5), "max_position_embeddings"),
    ("context-zero", edited(max_position_embeddings=0), "max_position_embeddings"),
    ("context-string", edited(max_position_embeddings="640"), "max_position_embeddings"),
    ("rms-eps-negative", edited(rms_norm_eps=-1e-5), "rms_norm_eps"),
    ("rms-eps-string", edited(rms_norm_eps="1e-5"), "rms_norm_eps"),
    ("rms-eps-one", edited(rms_norm_eps=1.0), "rms_norm_eps"),
    ("rope-theta-zero", edited(rope_parameters={"rope_theta": 0, "rope_type": "default"}), "rope_theta"),
    ("rope-theta-string", edited(rope_parameters={"rope_theta": "big"}), "rope_theta"),
    ("rope-parameters-list", edited(rope_parameters=[10000.0]), "rope_parameters"),
    ("rope-scaling-factor-negative", edited(rope_scaling={"factor": -2.0}), "rope_scaling.factor"),
    ("tie-embeddings-string", edited(tie_word_embeddings="yes"), "tie_word_embeddings"),
    ("attention-bias-int", edited(attention_bias=1), "attention_bias"),
    ("eos-outside-vocab", edited(eos_token_id=10**6), "eos_token_id"),
    ("bos-negative", edited(bos_token_id=-1), "bos_token_id"),
    ("pad-string", edited(pad_token_id="0"), "pad_token_id"),
    ("eos-list-with-float", edited(eos_token_id=[2, 2.5]), "eos_token_id"),
    ("model-type-unknown", edited(model_type="gpt_bogus"), "model_type"),
    ("model-type-null", edited(model_type=None), "model_type"),
    ("model-type-missing", edited(model_type=DROP), "model_type"),
    ("model-type-number", edited(model_type=5), "model_type"),
    ("model-type-not-loaded-by-ares", edited(model_type="bert"), "model_type"),
    ("text-config-on-llama", edited(text_config={"hidden_size": 128}), "text_config"),
    ("text-config-a-string", edited(text_config="qwen"), "text_config"),
    ("vision-config-on-llama", edited(vision_config={"depth": 2}), "vision_config"),
    ("layer-types-too-short", edited(layer_types=["full_attention"]), "layer_types"),
]
RAW_CONFIG_BAD = [
    ("a-list", b"[]", "must be a JSON object"),
    ("a-string", b'"llama"', "must be a JSON object"),
    ("a-number", b"4", "must be a JSON object"),
    ("null", b"null", "must be a JSON object"),
    ("context-nan", json.dumps(toy_config()).replace('"max_position_embeddings": 640', '"max_position_embeddings": NaN').encode(), "NaN"),
    ("context-infinity", json.dumps(toy_config()).replace('"max_position_embeddings": 640', '"max_position_embeddings": Infinity').encode(), "Infinity"),
    ("context-1e400", json.dumps(toy_config()).replace('"max_position_embeddings": 640', '"max_position_embeddings": 1e400').encode(), "max_position_embeddings"),
    ("rms-eps-1e400", json.dumps(toy_config()).replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e400').encode(), "rms_norm_eps"),
    ("nested-100000", b"[" * 100_000 + b"]" * 100_000, "nests deeper"),
    ("nested-field-40", json.dumps(edited(extra=json.loads("[" * 40 + "]" * 40))).encode(), "nests deeper"),
    ("empty", b"", "not valid JSON"),
    ("garbage", b"\x89PNG\r\n\x1a\n", "not"),
    ("not-utf8", b'{"model_type": "\xff\xfe"}', "UTF-8"),
    ("truncated-json", json.dumps(toy_config()).encode()[:-20], "not valid JSON"),
]  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("hostile-models-data") / "problems.jsonl",
                       [one_plus_one("p1"), one_plus_one("p2")])  # fmt: skip


@pytest.mark.parametrize(("config", "field"), [c[1:] for c in CONFIG_BAD], ids=[c[0] for c in CONFIG_BAD])
def test_a_lying_config_field_is_refused_naming_it(tmp_path, config, field):
    model = model_dir(tmp_path, config=config)
    assert_refused(plan_eval(tmp_path, model), str(model / "config.json"), field)


@pytest.mark.parametrize(
    ("raw", "words"), [c[1:] for c in RAW_CONFIG_BAD], ids=[c[0] for c in RAW_CONFIG_BAD]
)
def test_a_config_that_is_not_a_json_object_is_refused(tmp_path, raw, words):
    model = model_dir(tmp_path, raw_config=raw)
    assert_refused(plan_eval(tmp_path, model), str(model / "config.json"), words)


@pytest.mark.parametrize(("kind", "words"), [("directory", "a directory"), ("fifo", "FIFO"),
                                             ("huge-sparse", "over the"), ("device", "character device")])  # fmt: skip
def test_a_config_json_that_is_not_a_small_regular_file_is_refused(tmp_path, kind, words):
    model = model_dir(tmp_path)
    _config_file(kind, model / "config.json")
    assert_refused(plan_eval(tmp_path, model), str(model / "config.json"), words)


# ------------------------------------------------------------------ config against the headers (tensor)


def _tensors(drop=(), **changes) -> dict:
    tensors = {k: v for k, v in toy_tensors().items() if k not in drop}
    tensors.update({k.replace("__", "."): v for k, v in changes.items()})
    return tensors


HEADERS_BAD = [
    ("config-layers-6-weights-4", edited(num_hidden_layers=6), _tensors(), "num_hidden_layers"),
    ("config-layers-2-weights-4", edited(num_hidden_layers=2), _tensors(), "num_hidden_layers"),
    ("weights-skip-layer-2", None, _tensors(drop=[k for k in toy_tensors() if ".layers.2." in k]), "num_hidden_layers"),
    ("extra-tensor", None, _tensors(model__layers__0__self_attn__rotary__weight=([16], "F32")), "model.layers.0.self_attn.rotary.weight"),
    ("extra-layer-99", None, _tensors(model__layers__99__input_layernorm__weight=([128], "F32")), "num_hidden_layers"),
    ("missing-final-norm", None, _tensors(drop=["model.norm.weight"]), "model.norm.weight"),
    ("missing-embedding", None, _tensors(drop=["model.embed_tokens.weight"]), "model.embed_tokens.weight"),
    ("missing-q-proj", None, _tensors(drop=["model.layers.3.self_attn.q_proj.weight"]), "model.layers.3.self_attn.q_proj.weight"),
    ("embedding-wrong-shape", None, _tensors(model__embed_tokens__weight=([92, 64], "F32")), "model.embed_tokens.weight"),
    ("embedding-transposed", None, _tensors(model__embed_tokens__weight=([128, 92], "F32")), "model.embed_tokens.weight"),
    ("mlp-wrong-shape", None, _tensors(model__layers__1__mlp__up_proj__weight=([385, 128], "F32")), "model.layers.1.mlp.up_proj.weight"),
    ("norm-a-matrix", None, _tensors(model__norm__weight=([128, 1], "F32")), "model.norm.weight"),
    ("tied-head-wrong-shape", None, _tensors(lm_head__weight=([91, 128], "F32")), "lm_head.weight"),
    ("untied-config-no-head", edited(tie_word_embeddings=False), _tensors(), "lm_head.weight"),
    ("config-hidden-256", edited(hidden_size=256, head_dim=64), _tensors(), "model.embed_tokens.weight"),
    ("config-vocab-100", edited(vocab_size=100), _tensors(), "model.embed_tokens.weight"),
    ("norm-int64", None, _tensors(model__norm__weight=([128], "I64")), "model.norm.weight"),
    ("embedding-fp8", None, _tensors(model__embed_tokens__weight=([92, 128], "F8_E4M3")), "model.embed_tokens.weight"),
    ("dtype-unknown", None, _tensors(model__norm__weight=([128], "Q4_K")), "model.norm.weight"),
    ("shape-negative", None, _tensors(model__norm__weight=([-128], "F32")), "model.norm.weight"),
    ("shape-string", None, _tensors(model__norm__weight=("128", "F32")), "model.norm.weight"),
    ("shape-float", None, _tensors(model__norm__weight=([128.0], "F32")), "model.norm.weight"),
    ("shape-huge", None, _tensors(model__norm__weight=([2**50], "F32")), "model.norm.weight"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("config", "tensors", "named"), [c[1:] for c in HEADERS_BAD], ids=[c[0] for c in HEADERS_BAD]
)
def test_a_header_that_contradicts_the_config_is_refused_naming_the_tensor(tmp_path, config, tensors, named):
    model = model_dir(tmp_path, config=config, tensors=tensors)
    proc = plan_eval(tmp_path, model)
    assert_refused(proc, str(model), named)
    assert str(model / "config.json") in proc.stderr or str(model / "model.safetensors") in proc.stderr


def _raw_header(header) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text


NORM = {"dtype": "F32", "shape": [128], "data_offsets": [0, 512]}
RAW_HEADERS_BAD = [
    ("header-nested-10000", _raw_header(b'{"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"), "nests deeper"),
    ("header-a-list", _raw_header([NORM]), "not the JSON table of tensors"),
    ("header-not-json", _raw_header(b"{not json at all}"), "not valid JSON"),
    ("header-nan-offset", _raw_header(b'{"model.norm.weight": {"dtype": "F32", "shape": [128], "data_offsets": [0, NaN]}}'), "NaN"),
    ("header-longer-than-file", struct.pack("<Q", 10**6) + b"{}", "declares 1000000 header bytes"),
    ("header-length-2-64", b"\xff" * 64, "corrupt safetensors header"),
    ("file-of-4-bytes", b"\0\0\0\0", "no header"),
    ("file-empty", b"", "no header"),
    ("offsets-span-wrong", _raw_header({"model.norm.weight": {**NORM, "data_offsets": [0, 100]}}) + b"\0" * 100, "model.norm.weight"),
    ("offsets-overlap", _raw_header({"model.norm.weight": NORM, "model.embed_tokens.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}) + b"\0" * 512, "overlaps"),
    ("offsets-gap", _raw_header({"model.norm.weight": {**NORM, "data_offsets": [8, 520]}}) + b"\0" * 520, "gap"),
    ("offsets-strings", _raw_header({"model.norm.weight": {**NORM, "data_offsets": ["0", "512"]}}) + b"\0" * 512, "model.norm.weight"),
    ("entry-extra-key", _raw_header({"model.norm.weight": {**NORM, "device": "cuda"}}) + b"\0" * 512, "model.norm.weight"),
    ("entry-a-string", _raw_header({"model.norm.weight": "F32"}), "model.norm.weight"),
    ("metadata-not-strings", _raw_header({"__metadata__": {"format": 1}, "model.norm.weight": NORM}) + b"\0" * 512, "__metadata__"),
    ("data-truncated", _raw_header({"model.norm.weight": NORM}) + b"\0" * 100, "truncated safetensors"),
    ("data-trailing", _raw_header({"model.norm.weight": NORM}) + b"\0" * 4096, "corrupt safetensors"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "words"), [c[1:] for c in RAW_HEADERS_BAD], ids=[c[0] for c in RAW_HEADERS_BAD]
)
def test_an_unreadable_header_is_refused_naming_the_weights_file(tmp_path, raw, words):
    model = model_dir(tmp_path, weights=False)
    (model / "model.safetensors").write_bytes(raw)
    assert_refused(plan_eval(tmp_path, model), str(model / "model.safetensors"), words)


# ------------------------------------------------------------------ the stages run the same check


def _stage_args(stage: str, data: Path, model: Path) -> list[str]:
    if stage == "sft":
        return ["sft", "--data", str(data), "--model", str(model), "--max-steps", "1"]
    if stage == "rl":
        return ["rl", "--data", str(data), "--model", str(model)]
    if stage == "plan-rl":
        return ["plan", "rl", "--data", str(data), "--model", str(model)]
    if stage == "plan-passrate":
        return ["plan", "passrate", "--data", str(data), "--model", str(model), "-k", "2"]
    return [stage, "--data", str(data), "--model", str(model), *(["-k", "2"] if stage == "passrate" else [])]


STAGES = ("passrate", "eval", "sft", "rl", "plan-rl", "plan-passrate")
STAGE_CASES = [
    ("heads-zero", edited(num_attention_heads=0), None, "config.json", "num_attention_heads"),
    ("layers-string", edited(num_hidden_layers="4"), None, "config.json", "num_hidden_layers"),
    ("context-10e12", edited(max_position_embeddings=10**12), None, "config.json", "max_position_embeddings"),
    ("model-type-null", edited(model_type=None), None, "config.json", "model_type"),
    ("layers-6-weights-4", edited(num_hidden_layers=6), _tensors(), "config.json", "num_hidden_layers"),
    ("missing-final-norm", None, _tensors(drop=["model.norm.weight"]), "model.safetensors", "model.norm.weight"),
]  # fmt: skip


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(
    ("config", "tensors", "file", "named"), [c[1:] for c in STAGE_CASES], ids=[c[0] for c in STAGE_CASES]
)
def test_every_stage_refuses_a_lying_model_before_loading_it(
    tmp_path, data, stage, config, tensors, file, named
):
    model = model_dir(tmp_path, config=config, tensors=tensors)
    proc = _ares(tmp_path / "root", *_stage_args(stage, data, model))
    assert_refused(proc, str(model / file) if file == "config.json" else str(model), named)
    assert not any((tmp_path / "root").glob("*/*/manifest.json")), "an artifact was published"


# ------------------------------------------------------------------ refused in under 5 s, in a fresh process

_WATCHED = (
    "import signal; import torch, transformers; from ares_cli.main import main; "
    "from ares_cli.commands import plan, passrate; "
    f"signal.signal(signal.SIGALRM, signal.SIG_DFL); signal.setitimer(signal.ITIMER_REAL, {REFUSED_WITHIN_S}); "
    "main()"
)  # the imports are done before the timer starts; past it, the kernel ends the process (exit -14)


@pytest.mark.parametrize("command", ["plan", "passrate"])
@pytest.mark.parametrize("kind", ("directory", "fifo", "sparse-huge"))
def test_weights_that_are_not_a_file_are_refused_within_5_s(tmp_path, data, kind, command):
    model = model_dir(tmp_path)
    words = _weights_file(kind, model / "model.safetensors")
    args = (
        ["plan", "eval", "--suite", "toy"]
        if command == "plan"
        else ["passrate", "--data", str(data), "-k", "2"]
    )
    env = os.environ | {"ARES_ARTIFACTS": str(tmp_path / "root")}
    proc = subprocess.run([sys.executable, "-c", _WATCHED, *args, "--model", str(model)], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=300)  # fmt: skip
    assert proc.returncode != -signal.SIGALRM, (
        f"ares {command} took over {REFUSED_WITHIN_S} s: {proc.stderr[-500:]}"
    )
    assert_refused(proc, str(model / "model.safetensors"), words)


# ------------------------------------------------------------------ valid models and documented acceptances


def _sparse_valid(tmp: Path) -> Path:
    """The toy with a 384k-wide MLP whose weights are a sparse hole: a header-only checkpoint (~600 MB)."""
    from plan_models import write_header_only_safetensors

    config = edited(intermediate_size=2**17)
    model = model_dir(tmp, config=config, weights=False)
    tensors = {k: [s[0], 2**17] if "down_proj" in k else [2**17, s[1]] if "_proj" in k and "mlp" in k else s
               for k, (s, _) in toy_tensors().items()}  # fmt: skip
    write_header_only_safetensors(model / "model.safetensors", tensors, dtype="F32")
    return model


@pytest.mark.valid_input
def test_a_header_only_checkpoint_plans_but_a_stage_refuses_its_unwritten_weights(tmp_path, data):
    model = _sparse_valid(tmp_path)
    planned = plan_eval(tmp_path, model)
    assert planned.returncode == 0, planned.stdout[-2000:] + planned.stderr[-2000:]
    proc = _ares(tmp_path / "root", "passrate", "--data", str(data), "--model", str(model), "-k", "2")
    assert_refused(proc, str(model / "model.safetensors"), "sparse")


@pytest.mark.valid_input
@pytest.mark.parametrize("which", ["toy-base", "tiny-model", "toy-copy", "sharded"])
def test_the_valid_tiny_models_still_plan(tmp_path, tiny_model_dir, which):
    model = {"toy-base": TOY, "tiny-model": tiny_model_dir}.get(which) or model_dir(tmp_path)
    if which == "sharded":
        _index(model, _all_in("model.safetensors"))
    proc = plan_eval(tmp_path, model)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.valid_input
def test_the_vision_language_models_pass_the_check(tiny_vl_dir, tmp_path, qwen_tokenizer_json):
    from plan_models import header_only_twin

    from ares_cli.models.checked_dir import check_model_files

    for model in (VL, tiny_vl_dir, header_only_twin(tmp_path / "twin")):
        config, tensors = check_model_files(model)
        assert tensors and config["model_type"] in ("qwen2_5_vl", "qwen2")
