"""A model's ``config.json`` checked before anything trusts it: typed, ranged and self-consistent.

The architectures ares loads are :data:`MODEL_TYPES` (the toy's Llama, the Qwen2.5 text twins, the
Qwen2.5-VL of the tiny VL and the VL twins). Every size a shape is built from is a positive integer (a
bool, a float such as ``4.0`` or a string is refused) within :data:`INT_BOUNDS`, the context at most
:data:`MAX_CONTEXT` tokens, every float finite (``1e400`` parses as infinity) and positive, the widths
divisible as the attention needs (``hidden_size % num_attention_heads`` without a ``head_dim``,
``num_attention_heads % num_key_value_heads``), the special token ids inside the vocabulary. Each refusal
is an :class:`InputError` (exit 3) naming the file and the field (``text_config.hidden_size``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError
from ares_cli.store.untrusted import load_json_bounded

CONFIG_MAX_BYTES = 16 * 1024 * 1024  # a config.json is a few KB
CONFIG_MAX_DEPTH = 16  # a VL config nests 3 levels (vision_config.rope_parameters)
MODEL_TYPES = {"llama": "text", "qwen2": "text", "qwen2_5_vl": "vl"}  # what ares_cli.models loads
SUB_TYPES = {"text_config": "qwen2_5_vl_text", "vision_config": "qwen2_5_vl_vision"}
MAX_CONTEXT = 2**22  # 4,194,304 tokens: past every published context; 10**12 is a lie, not a model
INT_BOUNDS = {  # the largest published models stay well inside each (hidden 16384, 126 layers, vocab 256k)
    "vocab_size": 2**22, "hidden_size": 2**16, "intermediate_size": 2**18, "num_hidden_layers": 1024,
    "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 1024,
    "max_position_embeddings": MAX_CONTEXT,
}  # fmt: skip
REQUIRED_INTS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
OPTIONAL_INTS = ("num_key_value_heads", "head_dim", "max_position_embeddings")
FLAGS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window")
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "image_token_id", "video_token_id",
             "vision_start_token_id", "vision_end_token_id", "vision_token_id")  # fmt: skip
VISION_INTS = {"depth": 1024, "hidden_size": 2**16, "intermediate_size": 2**18, "num_heads": 1024,
               "out_hidden_size": 2**16, "patch_size": 1024, "spatial_merge_size": 64,
               "temporal_patch_size": 64, "window_size": 2**16}  # fmt: skip


def _fail(source: Path, field: str, message: str) -> InputError:
    return InputError(message, file=source, field=field)


def _int(section: dict, key: str, source: Path, prefix: str, bound: int, *, required: bool) -> int | None:
    """``section[key]`` as a positive integer at most ``bound`` (None when absent and not required)."""
    name = prefix + key
    value = section.get(key)
    if value is None:
        if required:
            raise _fail(source, name, f"config.json lacks {name} (a positive integer)")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(source, name, f"{name} must be a positive integer, not {type(value).__name__} {value!r}")
    if not 1 <= value <= bound:
        raise _fail(source, name, f"{name} is {value}; it must lie in 1..{bound:,}")
    return value


def _positive_float(value: Any, name: str, source: Path, *, below: float = math.inf) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(source, name, f"{name} must be a number, not {type(value).__name__} {value!r}")
    if not math.isfinite(value) or not 0 < value < below:
        limit = "" if below == math.inf else f" below {below}"
        raise _fail(source, name, f"{name} is {value}; it must be a finite number above 0{limit}")


def _floats(section: dict, source: Path, prefix: str) -> None:
    if "rms_norm_eps" in section:
        _positive_float(section["rms_norm_eps"], prefix + "rms_norm_eps", source, below=1.0)
    if section.get("rope_theta") is not None:
        _positive_float(section["rope_theta"], prefix + "rope_theta", source)
    for key in ("rope_parameters", "rope_scaling"):
        rope = section.get(key)
        if rope is None:
            continue
        if not isinstance(rope, dict):
            raise _fail(source, prefix + key, f"{prefix + key} must be an object, not {type(rope).__name__}")
        if rope.get("rope_theta") is not None:
            _positive_float(rope["rope_theta"], f"{prefix}{key}.rope_theta", source)
        if rope.get("factor") is not None:
            _positive_float(rope["factor"], f"{prefix}{key}.factor", source)


def _flags(section: dict, source: Path, prefix: str) -> None:
    for key in FLAGS:
        if key in section and section[key] is not None and not isinstance(section[key], bool):
            raise _fail(source, prefix + key, f"{prefix + key} must be true or false, not {section[key]!r}")


def _token_ids(section: dict, vocab: int, source: Path, prefix: str) -> None:
    for key in TOKEN_IDS:
        value = section.get(key)
        for token in value if isinstance(value, list) else [value]:
            if token is None:
                continue
            if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab:
                raise _fail(
                    source, prefix + key, f"{prefix + key} {token!r} is not a token id in 0..{vocab - 1}"
                )


def text_dims(config: dict, source: Path) -> dict[str, Any]:
    """The checked dimensions of the language model (a VL config's ``text_config`` over its top level)."""
    inner = config.get("text_config")
    prefix = "text_config." if isinstance(inner, dict) else ""
    section = {**config, **inner} if isinstance(inner, dict) else config
    dims: dict[str, Any] = {}
    for key in REQUIRED_INTS + OPTIONAL_INTS:
        dims[key] = _int(section, key, source, prefix, INT_BOUNDS[key], required=key in REQUIRED_INTS)
    heads, hidden = dims["num_attention_heads"], dims["hidden_size"]
    kv = dims["num_key_value_heads"] or heads
    if dims["head_dim"] is None and hidden % heads:
        raise _fail(source, prefix + "hidden_size",
                    f"{prefix}hidden_size {hidden} is not divisible by {prefix}num_attention_heads {heads}")  # fmt: skip
    if heads % kv:
        raise _fail(source, prefix + "num_key_value_heads",
                    f"{prefix}num_attention_heads {heads} is not divisible by {prefix}num_key_value_heads {kv}")  # fmt: skip
    dims["num_key_value_heads"], dims["head_dim"] = kv, dims["head_dim"] or hidden // heads
    layer_types = section.get("layer_types")
    if layer_types is not None and (
        not isinstance(layer_types, list) or len(layer_types) != dims["num_hidden_layers"]
    ):
        raise _fail(source, prefix + "layer_types",
                    f"{prefix}layer_types must list one entry per layer ({dims['num_hidden_layers']})")  # fmt: skip
    _floats(section, source, prefix)
    _flags(section, source, prefix)
    _token_ids(section, dims["vocab_size"], source, prefix)
    if prefix:
        _token_ids(config, dims["vocab_size"], source, "")
        _flags(config, source, "")
    dims["tied"] = bool(section.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    for flag in ("attention_bias", "mlp_bias"):
        dims[flag] = bool(section.get(flag, False))
    dims["mrope_section"] = (section.get("rope_parameters") or {}).get("mrope_section") or section.get(
        "mrope_section"
    )
    return dims


def vision_dims(config: dict, text_hidden: int, source: Path) -> dict[str, Any]:
    """The checked dimensions of a Qwen2.5-VL vision tower (``vision_config``)."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        raise _fail(source, "vision_config", "a qwen2_5_vl config needs a vision_config object")
    p = "vision_config."
    dims = {k: _int(vision, k, source, p, b, required=k != "window_size") for k, b in VISION_INTS.items()}
    dims["in_channels"] = _int(vision, "in_channels" if "in_channels" in vision else "in_chans", source, p, 16,
                               required=False) or 3  # fmt: skip
    if dims["hidden_size"] % dims["num_heads"]:
        raise _fail(source, p + "hidden_size",
                    f"{p}hidden_size {dims['hidden_size']} is not divisible by {p}num_heads {dims['num_heads']}")  # fmt: skip
    if dims["out_hidden_size"] != text_hidden:
        raise _fail(source, p + "out_hidden_size",
                    f"{p}out_hidden_size {dims['out_hidden_size']} differs from the language model's hidden_size "
                    f"{text_hidden}")  # fmt: skip
    full = vision.get("fullatt_block_indexes", [])
    if not isinstance(full, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < dims["depth"]
                                         for i in full):  # fmt: skip
        raise _fail(
            source,
            p + "fullatt_block_indexes",
            f"{p}fullatt_block_indexes must list blocks in 0..{dims['depth'] - 1}",
        )
    _floats(vision, source, p)
    return dims


def _check_types(config: dict, source: Path) -> str:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        raise _fail(source, "model_type", f"model_type {model_type!r} is not one ares loads "
                    f"({', '.join(sorted(MODEL_TYPES))})")  # fmt: skip
    for key, expected in SUB_TYPES.items():
        inner = config.get(key)
        if inner is None:
            continue
        if not isinstance(inner, dict):
            raise _fail(source, key, f"{key} must be an object, not {type(inner).__name__}")
        if MODEL_TYPES[model_type] != "vl":
            raise _fail(source, key, f"a {model_type} config has no {key}")
        if inner.get("model_type", expected) != expected:
            raise _fail(
                source, f"{key}.model_type", f"{key}.model_type {inner['model_type']!r} is not {expected!r}"
            )
    return model_type


def check_config(config: Any, source: str | Path) -> dict[str, Any]:
    """The checked dimensions of a parsed ``config.json`` (``model_type``, ``text``, ``vision``); InputError
    naming ``source`` and the field on the first fault."""
    source = Path(source)
    if not isinstance(config, dict):
        raise InputError(f"config.json must be a JSON object, not a {type(config).__name__}", file=source)
    model_type = _check_types(config, source)
    text = text_dims(config, source)
    if MODEL_TYPES[model_type] == "vl":
        section = text["mrope_section"]
        half = text["head_dim"] // 2
        if section is not None and (not isinstance(section, list) or not all(
                isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in section) or sum(section) != half):  # fmt: skip
            raise _fail(source, "text_config.rope_parameters.mrope_section",
                        f"mrope_section {section!r} must be positive integers summing to head_dim / 2 = {half}")  # fmt: skip
        return {
            "model_type": model_type,
            "text": text,
            "vision": vision_dims(config, text["hidden_size"], source),
        }
    return {"model_type": model_type, "text": text, "vision": None}


def load_config(directory: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A model directory's ``config.json`` read bounded (a regular file, size and depth limited) and checked
    by :func:`check_config`: ``(config, checked dimensions)``."""
    path = Path(directory) / "config.json"
    config = load_json_bounded(
        path, max_bytes=CONFIG_MAX_BYTES, max_depth=CONFIG_MAX_DEPTH, what="config.json"
    )
    return config, check_config(config, path)
