"""Shape twins at full depth without their weights, for ``ares plan`` tests: the twin's ``config.json`` and
``generation_config.json`` (``ares_cli/rehearsal/twins.py``), its offline Qwen2.5 tokenizer, and a safetensors
file whose header declares every tensor ``ares toy twin`` would save, at its true shape (the data region
is a sparse hole: no bytes are written). ``ares plan`` reads only configs, headers and the tokenizer, so
it sizes this directory exactly as it sizes ``ares toy twin NAME --layers FULL``'s (3 GB for the 1.5B).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path


def twin_tensors(name: str, layers: int | None = None) -> dict[str, list[int]]:
    """Every tensor ``save_pretrained`` writes for twin ``name`` (a tied head is stored once), by shape:
    the model is built on the meta device, so nothing is allocated."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from ares_cli.rehearsal.twins import twin_config, twin_spec

    config = twin_config(name, layers)
    auto = AutoModelForImageTextToText if twin_spec(name).kind == "vl" else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config)
    tensors = {k: list(v.shape) for k, v in model.state_dict().items()}
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    return tensors


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


def header_only_twin(directory: Path, name: str = "qwen2.5-math-1.5b", layers: int | None = None) -> Path:
    """``directory`` holding twin ``name`` at ``layers`` (default: its full depth), weights left out."""
    from transformers import GenerationConfig

    from ares_cli.rehearsal.qwen_tokenizer import build_tokenizer
    from ares_cli.rehearsal.twins import twin_config, twin_spec, vl_processor

    spec = twin_spec(name)
    layers = layers or spec.full_layers
    directory.mkdir(parents=True, exist_ok=True)
    twin_config(name, layers).save_pretrained(str(directory))
    GenerationConfig(**spec.generation).save_pretrained(str(directory))
    write_header_only_safetensors(directory / "model.safetensors", twin_tensors(name, layers))
    tokenizer = build_tokenizer(spec.tokenizer)
    (vl_processor(tokenizer) if spec.kind == "vl" else tokenizer).save_pretrained(str(directory))
    return directory
