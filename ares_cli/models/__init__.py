"""Everything about loading and inspecting a model, shared by every stage (passrate, eval, sft, rl).

- :mod:`ares_cli.models.loading`: text or vision-language model, tokenizer, processor, dtype, freezing.
- :mod:`ares_cli.models.heads`: the decoder trunk (final hidden states) and the ``lm_head`` weight.
- :mod:`ares_cli.models.processor`: an image-only Qwen2.5-VL processor (works without torchvision).
- :mod:`ares_cli.models.vision`: image inputs of a prompt and the extra forward inputs; :mod:`.pixels` the
  Qwen2.5-VL resize bounds and vision tokens.

The tiny random Qwen2.5-VL of the tests and the visual toy world is built in :mod:`ares_cli.toy.tiny_vl`.

Importing this package is cheap: torch and transformers load inside the functions.
"""

from __future__ import annotations

from ares_cli.models.heads import decoder_trunk, final_hidden_states, lm_head_weight
from ares_cli.models.loading import (
    MERGER_PATTERNS,
    VISION_PATTERNS,
    check_image_support,
    freeze_by_name,
    freeze_vision_tower,
    is_vision_language,
    load_model,
    load_processor,
    load_tokenizer,
    resolve_dtype,
)

__all__ = [
    "MERGER_PATTERNS",
    "VISION_PATTERNS",
    "check_image_support",
    "decoder_trunk",
    "final_hidden_states",
    "freeze_by_name",
    "freeze_vision_tower",
    "is_vision_language",
    "lm_head_weight",
    "load_model",
    "load_processor",
    "load_tokenizer",
    "resolve_dtype",
]
