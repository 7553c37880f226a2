"""Image inputs of a vision-language model: encoding a prompt with its images, and the extra forward inputs.

One prompt with images is encoded by the processor into token ids (one ``<|image_pad|>`` per merged
patch) and a :class:`VisionInputs` (pixel patches and the (t, h, w) grid of each image). Every forward
pass that sees those ids (generation prefill, RL re-scoring, SFT) calls :func:`forward_inputs`, which
concatenates the rows' images in row order and builds Qwen2.5-VL's 3-D rotary positions from
``mm_token_type_ids`` (derived from the ids: image pad -> 1, video pad -> 2) with the model's own
``get_rope_index``, so positions never fall back to 1-D. Positions are passed explicitly, so the model's
cached ``rope_deltas`` are never used. Vision special tokens are kept out of sampled text
(:func:`suppressed_token_ids`): a sampled ``<|image_pad|>`` would not match any image when re-scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

_SUPPRESSED = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")


@dataclass
class VisionInputs:
    """The images of one prompt, as the vision tower takes them."""

    pixel_values: torch.Tensor  # (patches, channels * temporal * patch * patch)
    image_grid_thw: torch.Tensor  # (images, 3)
    key: tuple[str, ...] = ()  # the image paths (rows with equal ids and key share a prefill)

    def to(self, device) -> VisionInputs:
        return VisionInputs(self.pixel_values.to(device), self.image_grid_thw.to(device), self.key)


def encode_prompt(tokenizer, processor, prompt: str, images: Sequence[str] = ()) -> tuple[list[int], Any]:
    """Token ids of a rendered prompt and its :class:`VisionInputs` (None without images).

    With images the processor expands each image placeholder to the image's token count."""
    if not images:
        return tokenizer(prompt, add_special_tokens=False)["input_ids"], None
    from ares_cli.data.images import open_image

    if processor is None:
        raise TypeError("images need a processor")
    pictures = [open_image(path) for path in images]
    enc = processor(text=[prompt], images=pictures, return_tensors="pt", add_special_tokens=False)
    ids = enc["input_ids"][0].tolist()
    return ids, VisionInputs(enc["pixel_values"], enc["image_grid_thw"], tuple(str(p) for p in images))


def encode_images(processor, images: Sequence[str]) -> VisionInputs:
    """The :class:`VisionInputs` of ``images`` alone (no text), through the processor's image processor."""
    from ares_cli.data.images import open_image

    out = processor.image_processor(images=[open_image(p) for p in images], return_tensors="pt")
    return VisionInputs(out["pixel_values"], out["image_grid_thw"], tuple(str(p) for p in images))


def image_token_counts(processor, vision: VisionInputs) -> list[int]:
    """Placeholder tokens each image expands to: its merged patch count."""
    merge = int(getattr(processor.image_processor, "merge_size", 2)) ** 2
    return [int(n) // merge for n in vision.image_grid_thw.prod(-1).tolist()]


def unwrap(model):
    """The transformers model inside a DeepSpeed engine (or the model itself)."""
    return getattr(model, "module", model)


def suppressed_token_ids(model) -> list[int]:
    """Vision special token ids of ``model`` (empty for a text model); generation never samples them."""
    config = unwrap(model).config
    return sorted({int(v) for name in _SUPPRESSED if (v := getattr(config, name, None)) is not None})


def is_vision_model(model) -> bool:
    return hasattr(unwrap(model).config, "vision_config")


def mm_token_type_ids(model, input_ids: torch.Tensor) -> torch.Tensor:
    """0 for text, 1 for image placeholders, 2 for video placeholders."""
    config = unwrap(model).config
    types = torch.zeros_like(input_ids)
    types[input_ids == config.image_token_id] = 1
    if getattr(config, "video_token_id", None) is not None:
        types[input_ids == config.video_token_id] = 2
    return types


def forward_inputs(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, vision: Sequence[VisionInputs | None] | None
) -> dict[str, torch.Tensor]:
    """``position_ids`` (and ``pixel_values``, ``image_grid_thw`` when a row has images) for a forward over
    ``input_ids`` with ``attention_mask`` (any padding); ``vision`` has one entry per row.

    Without images positions count the attended tokens (``cumsum - 1``), as for a text model; with images
    they are the model's 3-D rotary positions, shape (3, batch, seq)."""
    rows = [v for v in (vision or ()) if v is not None]
    if not rows:
        return {"position_ids": (attention_mask.long().cumsum(-1) - 1).clamp(min=0)}
    device = input_ids.device
    grid = torch.cat([v.image_grid_thw for v in rows]).to(device)
    pixels = torch.cat([v.pixel_values for v in rows]).to(device)
    trunk = unwrap(model)
    trunk = getattr(trunk, trunk.base_model_prefix)
    positions, _ = trunk.get_rope_index(
        input_ids,
        mm_token_type_ids=mm_token_type_ids(model, input_ids),
        image_grid_thw=grid,
        attention_mask=attention_mask,
    )
    return {"position_ids": positions, "pixel_values": pixels, "image_grid_thw": grid}


def next_positions(position_ids: torch.Tensor) -> torch.Tensor:
    """(batch,) position of each row's next token: one past its largest position (1-D or 3-D ids)."""
    if position_ids.dim() == 3:
        return position_ids.amax(dim=(0, 2)) + 1
    return position_ids.amax(dim=-1) + 1
