"""Model directories at real shapes without real weights, for ``ares plan`` tests: a real configuration's
``config.json``, a safetensors file whose header declares every tensor at its true shape (the data region
is a sparse hole: no bytes are written) and the tiny test tokenizer.

Kept local to the tests; the real-shape twins of ``ares toy twin`` can replace them.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

# Qwen2.5-Math-1.5B's config.json (the values that shape it)
QWEN25_MATH_15B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 1536,
    "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
    "max_position_embeddings": 4096, "tie_word_embeddings": True, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151643,
}  # fmt: skip


def qwen2_tensors(config: dict) -> dict[str, list[int]]:
    """Every tensor name and shape of a Qwen2ForCausalLM of ``config`` (biases on q/k/v, as Qwen2 has)."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = config["num_key_value_heads"] * (h // config["num_attention_heads"])
    out = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out |= {p + "self_attn.q_proj.weight": [h, h], p + "self_attn.q_proj.bias": [h],
                p + "self_attn.k_proj.weight": [kv, h], p + "self_attn.k_proj.bias": [kv],
                p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.v_proj.bias": [kv],
                p + "self_attn.o_proj.weight": [h, h], p + "mlp.gate_proj.weight": [i, h],
                p + "mlp.up_proj.weight": [i, h], p + "mlp.down_proj.weight": [h, i],
                p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h]}  # fmt: skip
    if not config.get("tie_word_embeddings"):
        out["lm_head.weight"] = [v, h]
    return out


def write_header_only_safetensors(path: Path, tensors: dict[str, list[int]], dtype: str = "BF16") -> int:
    """A valid safetensors file for ``tensors`` whose data region is a hole (sparse): returns its size."""
    width = {"BF16": 2, "F16": 2, "F32": 4}[dtype]
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors.items():
        n = width
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)))
        fh.write(text)
        fh.truncate(8 + len(text) + offset)
    return 8 + len(text) + offset


def header_only_model(directory: Path, config: dict = QWEN25_MATH_15B) -> Path:
    """``directory`` with config.json, a header-only model.safetensors and the tiny tokenizer."""
    from fixtures_tiny_model import tiny_tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    write_header_only_safetensors(directory / "model.safetensors", qwen2_tensors(config))
    tiny_tokenizer().save_pretrained(str(directory))
    return directory
