"""Shape twins: random-initialised models with a paper model's real configuration, at reduced depth.

One table, :data:`TWINS`, holds every twin's configuration as its public ``config.json`` and
``generation_config.json`` on the Hugging Face hub set it (the URL of each is in the entry); a twin keeps
the full width, vocabulary, attention layout (grouped-query heads), tied or untied embeddings, rope and,
for Qwen2.5-VL, the vision tower's width and 3-D (m-)rope, and cuts only the depth: ``layers`` decoder
layers (and as many vision blocks), default :data:`DEFAULT_LAYERS`, except ``qwen2.5-0.5b``, built at its
full 24 layers for memory and time measurements. The tokenizer is the offline Qwen2.5 tokenizer
(:mod:`ares_cli.rehearsal.qwen_tokenizer`) of the model's flavour, and a VL twin gets Qwen2.5-VL's published
image processor configuration. Weights are stored in bf16, as the published checkpoints are.

A model directory built here is an ordinary ``save_pretrained`` checkpoint plus ``twin.json`` (the twin's
name, source repository, layers kept and full depth), so tools that size a real model (``ares plan``) can
read a twin's directory as they read the real one's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ares_cli.errors import UsageError

TWIN_VERSION = 1
DEFAULT_LAYERS = 2


@dataclass(frozen=True)
class TwinSpec:
    """A paper model's published configuration (text fields as in its config.json)."""

    repo: str  # the hub repository the values are taken from
    kind: str  # "text" (Qwen2ForCausalLM) or "vl" (Qwen2_5_VLForConditionalGeneration)
    tokenizer: str  # flavour of ares_cli.rehearsal.qwen_tokenizer: base, instruct, math, vl
    text: dict[str, Any]
    generation: dict[str, Any]
    vision: dict[str, Any] = field(default_factory=dict)
    full_depth_default: bool = False  # built at full depth unless --layers says otherwise

    @property
    def full_layers(self) -> int:
        return int(self.text["num_hidden_layers"])


QWEN25_VISION = {  # vision_config of Qwen/Qwen2.5-VL-7B-Instruct/config.json (the 3B's differs in out_hidden_size)
    "depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
    "in_chans": 3, "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2, "temporal_patch_size": 2,
}  # fmt: skip
VISION_TOKEN_IDS = {  # Qwen/Qwen2.5-VL-7B-Instruct/config.json (the same in the 3B)
    "vision_start_token_id": 151652, "vision_end_token_id": 151653, "vision_token_id": 151654,
    "image_token_id": 151655, "video_token_id": 151656,
}  # fmt: skip
# preprocessor_config.json of Qwen/Qwen2.5-VL-7B-Instruct (and -3B-Instruct)
VL_IMAGE_PROCESSOR = {
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
}  # fmt: skip

TWINS: dict[str, TwinSpec] = {
    # https://huggingface.co/Qwen/Qwen2.5-Math-1.5B/blob/main/config.json, generation_config.json
    "qwen2.5-math-1.5b": TwinSpec(
        repo="Qwen/Qwen2.5-Math-1.5B", kind="text", tokenizer="math",
        text={"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
              "num_key_value_heads": 2, "max_position_embeddings": 4096, "max_window_layers": 21,
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "sliding_window": 4096, "use_sliding_window": False,
              "tie_word_embeddings": True, "vocab_size": 151936, "hidden_act": "silu",
              "bos_token_id": 151643, "eos_token_id": 151643},
        generation={"bos_token_id": 151643, "eos_token_id": 151643, "max_new_tokens": 2048},
    ),
    # https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json, generation_config.json
    "qwen2.5-7b-instruct": TwinSpec(
        repo="Qwen/Qwen2.5-7B-Instruct", kind="text", tokenizer="instruct",
        text={"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
              "num_key_value_heads": 4, "max_position_embeddings": 32768, "max_window_layers": 28,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "sliding_window": 131072,
              "use_sliding_window": False, "tie_word_embeddings": False, "vocab_size": 152064,
              "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151645},
        generation={"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
                    "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.7,
                    "top_p": 0.8, "top_k": 20},
    ),
    # https://huggingface.co/Qwen/Qwen2.5-VL-3B-Instruct/blob/main/config.json, generation_config.json
    "qwen2.5-vl-3b": TwinSpec(
        repo="Qwen/Qwen2.5-VL-3B-Instruct", kind="vl", tokenizer="vl",
        text={"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16,
              "num_key_value_heads": 2, "max_position_embeddings": 128000, "max_window_layers": 70,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "mrope_section": [16, 24, 24],
              "sliding_window": 32768, "use_sliding_window": False, "tie_word_embeddings": True,
              "vocab_size": 151936, "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151645},
        vision={**QWEN25_VISION, "out_hidden_size": 2048},
        generation={"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
                    "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.1,
                    "top_p": 0.001, "top_k": 1},
    ),
    # https://huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/blob/main/config.json, generation_config.json
    "qwen2.5-vl-7b": TwinSpec(
        repo="Qwen/Qwen2.5-VL-7B-Instruct", kind="vl", tokenizer="vl",
        text={"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
              "num_key_value_heads": 4, "max_position_embeddings": 128000, "max_window_layers": 28,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "mrope_section": [16, 24, 24],
              "sliding_window": 32768, "use_sliding_window": False, "tie_word_embeddings": False,
              "vocab_size": 152064, "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151645},
        vision={**QWEN25_VISION, "out_hidden_size": 3584},
        generation={"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
                    "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.1,
                    "top_p": 0.001, "top_k": 1},
    ),
    # https://huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json, generation_config.json
    "qwen2.5-0.5b": TwinSpec(
        repo="Qwen/Qwen2.5-0.5B", kind="text", tokenizer="base", full_depth_default=True,
        text={"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
              "num_key_value_heads": 2, "max_position_embeddings": 32768, "max_window_layers": 24,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": False,
              "tie_word_embeddings": True, "vocab_size": 151936, "hidden_act": "silu",
              "bos_token_id": 151643, "eos_token_id": 151643},
        generation={"bos_token_id": 151643, "eos_token_id": 151643, "do_sample": False, "max_new_tokens": 2048},
    ),
}  # fmt: skip


def twin_spec(name: str) -> TwinSpec:
    if name not in TWINS:
        raise UsageError(f"unknown twin {name!r}; valid: {', '.join(sorted(TWINS))}")
    return TWINS[name]


def twin_layers(name: str, layers: int | None) -> int:
    """Decoder layers of a twin: ``layers`` (1..full depth), else the full depth for a full-depth twin, else
    :data:`DEFAULT_LAYERS`."""
    spec = twin_spec(name)
    if layers is None:
        return spec.full_layers if spec.full_depth_default else DEFAULT_LAYERS
    if not 1 <= layers <= spec.full_layers:
        raise UsageError(f"--layers {layers}: {name} has 1..{spec.full_layers} layers")
    return layers


def twin_config(name: str, layers: int | None = None):
    """The transformers config of twin ``name`` with ``layers`` decoder layers (and vision blocks)."""
    from transformers import AutoConfig, Qwen2_5_VLConfig

    spec, n = twin_spec(name), twin_layers(name, layers)
    text = {k: v for k, v in spec.text.items() if k not in ("rope_theta", "mrope_section")}
    text["num_hidden_layers"] = n
    text["max_window_layers"] = min(spec.text["max_window_layers"], n)
    rope = {"rope_type": "default", "rope_theta": spec.text["rope_theta"]}
    if spec.kind == "text":
        return AutoConfig.for_model("qwen2", **text, rope_parameters=rope, dtype="bfloat16")
    depth = min(n, spec.vision["depth"])
    full_attention = [i for i in spec.vision["fullatt_block_indexes"] if i < depth] or [depth - 1]
    vision = {**spec.vision, "depth": depth, "fullatt_block_indexes": full_attention}
    tie = text.pop("tie_word_embeddings")
    return Qwen2_5_VLConfig(
        text_config={**text, "rope_parameters": {**rope, "mrope_section": spec.text["mrope_section"]},
                     "tie_word_embeddings": tie},
        vision_config=vision, tie_word_embeddings=tie, dtype="bfloat16", **VISION_TOKEN_IDS,
    )  # fmt: skip


def twin_parameters(name: str, layers: int | None = None) -> int:
    """Parameter count of twin ``name`` at ``layers`` (default depth when None), counted on the meta device:
    the model's modules are built without allocating or initialising a weight."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    auto = AutoModelForImageTextToText if twin_spec(name).kind == "vl" else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(twin_config(name, layers), dtype=torch.bfloat16)
    return sum(p.numel() for p in model.parameters())


def build_twin(name: str, out_dir: str | Path, *, layers: int | None = None, seed: int = 0) -> dict[str, Any]:
    """Build twin ``name`` into ``out_dir`` (model in bf16, tokenizer, and for VL the processor, all with
    ``save_pretrained``, plus ``twin.json``); returns what ``twin.json`` holds."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, GenerationConfig

    from ares_cli.rehearsal.qwen_tokenizer import build_tokenizer

    spec, n = twin_spec(name), twin_layers(name, layers)
    tokenizer = build_tokenizer(spec.tokenizer)  # first: a missing qwen-tokenizer fails before any work
    config = twin_config(name, n)
    auto = AutoModelForImageTextToText if spec.kind == "vl" else AutoModelForCausalLM
    torch.manual_seed(seed)
    model = auto.from_config(config, dtype=torch.bfloat16)
    model.generation_config = GenerationConfig(**spec.generation)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    params = sum(p.numel() for p in model.parameters())
    del model
    if spec.kind == "vl":
        vl_processor(tokenizer).save_pretrained(str(out_dir))
    else:
        tokenizer.save_pretrained(str(out_dir))
    info = {"twin": name, "twin_version": TWIN_VERSION, "source": spec.repo, "layers": n,
            "full_layers": spec.full_layers, "seed": seed, "parameters": params, "dtype": "bfloat16"}  # fmt: skip
    (out_dir / "twin.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return info


def vl_processor(tokenizer):
    """Qwen2.5-VL's image processor as published (pixel bounds, patch and merge sizes, CLIP mean/std) with
    ``tokenizer`` and its chat template (PIL image processor: no torchvision needed)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from ares_cli.models.processor import ImageOnlyProcessor

    images = Qwen2VLImageProcessorPil(**VL_IMAGE_PROCESSOR)
    return ImageOnlyProcessor(
        image_processor=images, tokenizer=tokenizer, chat_template=tokenizer.chat_template
    )
