"""A tiny random-initialised Qwen2.5-VL (the real transformers class) with a processor, for CPU work.

Used by the tests and reusable by the visual toy world: :func:`build_vl_tokenizer` extends the toy
character tokenizer with Qwen2.5-VL's vision tokens and an image-aware chat template, :func:`vl_config`
builds a consistent config from a :class:`VLShape` (vision token ids taken from the tokenizer; the mrope
sections sum to head_dim / 2), and :func:`save_tiny_vl` writes model, tokenizer and processor with
``save_pretrained`` so :func:`ares_cli.models.load_model` / ``load_processor`` load them like any
checkpoint.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from ares_cli.models.pixels import VISION_TOKENS

IMAGE_BLOCK = "<|vision_start|><|image_pad|><|vision_end|>"

VL_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '" + IMAGE_BLOCK + "' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


@dataclass(frozen=True)
class VLShape:
    """Size of the tiny Qwen2.5-VL (defaults: about 0.2 M parameters; images of 28-56 px per side)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    max_positions: int = 1024
    vision_depth: int = 2
    vision_hidden_size: int = 32
    vision_heads: int = 2
    vision_intermediate_size: int = 64
    min_pixels: int = 28 * 28
    max_pixels: int = 56 * 56

    def as_dict(self) -> dict:
        return asdict(self)


def mrope_section(head_dim: int) -> list[int]:
    """(temporal, height, width) rotary sections summing to head_dim / 2, in Qwen2.5-VL's 1:1.5:1.5 ratio."""
    half = head_dim // 2
    t = half // 4
    h = (half - t) // 2
    return [t, h, half - t - h]


def build_vl_tokenizer():
    """The toy character tokenizer plus the vision special tokens and an image-aware chat template."""
    from ares_cli.toy.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.add_tokens(list(VISION_TOKENS), special_tokens=True)
    tokenizer.chat_template = VL_CHAT_TEMPLATE
    return tokenizer


def vl_config(tokenizer, shape: VLShape):
    """A ``Qwen2_5_VLConfig`` for ``shape`` whose special and vision token ids come from ``tokenizer``."""
    from transformers import Qwen2_5_VLConfig

    head_dim = shape.hidden_size // shape.num_heads
    ids = dict(zip(VISION_TOKENS, tokenizer.convert_tokens_to_ids(list(VISION_TOKENS)), strict=True))
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_layers,
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_heads,
        "max_position_embeddings": shape.max_positions,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": mrope_section(head_dim),
        },
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "tie_word_embeddings": True,
    }
    vision = {
        "depth": shape.vision_depth,
        "hidden_size": shape.vision_hidden_size,
        "intermediate_size": shape.vision_intermediate_size,
        "num_heads": shape.vision_heads,
        "out_hidden_size": shape.hidden_size,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [shape.vision_depth - 1],
    }
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )


def build_tiny_vl(tokenizer, shape: VLShape, seed: int):
    """A freshly initialised ``Qwen2_5_VLForConditionalGeneration`` (fp32), deterministic in ``seed``."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(vl_config(tokenizer, shape))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def build_processor(tokenizer, shape: VLShape):
    """An image-only Qwen2.5-VL processor (PIL image processor, no torchvision) for ``tokenizer``."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from ares_cli.models.processor import ImageOnlyProcessor

    images = Qwen2VLImageProcessorPil(
        min_pixels=shape.min_pixels,
        max_pixels=shape.max_pixels,
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
    )
    return ImageOnlyProcessor(
        image_processor=images, tokenizer=tokenizer, chat_template=tokenizer.chat_template
    )


def save_tiny_vl(out_dir: str | Path, shape: VLShape | None = None, *, seed: int = 0):
    """Build tokenizer, processor and model and ``save_pretrained`` all three into ``out_dir``; returns the
    model."""
    shape = shape or VLShape()
    tokenizer = build_vl_tokenizer()
    model = build_tiny_vl(tokenizer, shape, seed)
    model.save_pretrained(str(out_dir))
    build_processor(tokenizer, shape).save_pretrained(str(out_dir))
    return model
