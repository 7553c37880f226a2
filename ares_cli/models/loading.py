"""Load a causal LM or a vision-language model (Qwen2.5-VL), its tokenizer and processor; freeze by name.

A checkpoint is vision-language when its ``config.json`` has a ``vision_config``; it then loads through
``AutoModelForImageTextToText`` (for Qwen2.5-VL: ``Qwen2_5_VLForConditionalGeneration``) and has a
processor; a text checkpoint loads through ``AutoModelForCausalLM`` and has none.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError, UsageError

VISION_PATTERNS = ("visual", "vision_tower", "vision_model")
MERGER_PATTERNS = ("merger", "multi_modal_projector")
DTYPES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16"}
DTYPES |= {"fp16": "float16", "float16": "float16"}


def model_config(path: str | Path) -> dict[str, Any]:
    """The checkpoint's ``config.json`` as a dict (a local directory, or a hub id in the local cache), read
    bounded and checked (:mod:`ares_cli.models.config_checks`: exit 3 naming the file and field)."""
    from ares_cli.models.config_checks import check_config, load_config

    if os.path.lexists(Path(path) / "config.json"):
        return load_config(path)[0]
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(path)).to_dict()
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise InputError(f"{path}: not a model directory or cached hub id ({e})") from e
    check_config(config, f"{path}/config.json")
    return config


def is_vision_language(path: str | Path) -> bool:
    """True when the checkpoint at ``path`` has a vision tower (its config has a ``vision_config``)."""
    return "vision_config" in model_config(path)


def resolve_dtype(name: str | None, device: str):
    """A torch dtype from ``fp32``/``bf16``/``fp16`` (or their long names); None or ``auto`` = bf16 on CUDA,
    fp32 on CPU."""
    import torch

    if name in (None, "auto"):
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    if name not in DTYPES:
        raise UsageError(f"unknown dtype {name!r}; choose one of auto, {', '.join(sorted(DTYPES))}")
    return getattr(torch, DTYPES[name])


def load_model(path: str | Path, *, dtype: Any = "fp32", device: str | None = None):
    """The model at ``path`` with the right auto class (text or vision-language), in ``dtype`` (a name or a
    torch dtype), moved to ``device`` when given."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    if os.path.lexists(Path(path) / "config.json"):  # a local directory: config and headers checked first
        from ares_cli.models.checked_dir import check_model_files

        check_model_files(path, loads_weights=True)
    torch_dtype = dtype if isinstance(dtype, torch.dtype) else resolve_dtype(dtype, device or "cpu")
    auto = AutoModelForImageTextToText if is_vision_language(path) else AutoModelForCausalLM
    model = auto.from_pretrained(str(path), dtype=torch_dtype, use_safetensors=True)  # never unpickled
    return model.to(device) if device is not None else model


def load_tokenizer(path: str | Path):
    """The checkpoint's tokenizer (``AutoTokenizer``)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def load_processor(path: str | Path, *, min_pixels: int | None = None, max_pixels: int | None = None):
    """The processor of a vision-language checkpoint (None for a text model).

    ``AutoProcessor`` first; where it cannot be built (the stock Qwen2.5-VL processor needs torchvision for
    its video processor), the image-only processor of :mod:`ares_cli.models.processor` from the same files.
    ``min_pixels``/``max_pixels`` override the image processor's resize bounds.
    """
    if not is_vision_language(path):
        return None
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(str(path))
    except (ImportError, AttributeError, ValueError, TypeError, OSError):
        processor = None
    if processor is None or getattr(processor, "image_processor", None) is None:
        from ares_cli.models.processor import ImageOnlyProcessor

        processor = ImageOnlyProcessor.from_pretrained(str(path))
    size = dict(getattr(processor.image_processor, "size", None) or {})
    if min_pixels is not None:
        size["shortest_edge"] = int(min_pixels)
    if max_pixels is not None:
        size["longest_edge"] = int(max_pixels)
    if size:
        processor.image_processor.size = size
    return processor


def check_image_support(records, locations, model: str | Path | None) -> None:
    """Exit 3 before any work when records have images and ``model`` is text-only (names the first such
    record's file and row, field ``images``). No model (replayed completions) checks nothing."""
    first = next((i for i, r in enumerate(records) if r.get("images")), None)
    if first is None or model is None or is_vision_language(model):
        return
    file, row = locations[first] if first < len(locations) else (None, None)
    n = sum(1 for r in records if r.get("images"))
    raise InputError(
        f"{n} record(s) have images but model {model} is text-only (no vision tower); use a vision-language "
        "model or drop the images",
        file=file,
        row=row,
        field="images",
    )


def freeze_by_name(model, patterns: Iterable[str], *, keep: Iterable[str] = ()) -> int:
    """``requires_grad=False`` on parameters whose dotted name has a part in ``patterns`` and none in
    ``keep``; returns the number of frozen elements."""
    patterns, keep = tuple(patterns), tuple(keep)
    frozen = 0
    for name, param in model.named_parameters():
        parts = name.split(".")
        if any(p in patterns for p in parts) and not any(k in keep for k in parts):
            param.requires_grad_(False)
            frozen += int(getattr(param, "ds_numel", param.numel()))  # a ZeRO-3 partition: its real size
    return frozen


def freeze_vision_tower(model, *, train_merger: bool = False) -> int:
    """Freeze the vision tower (ARES trains the language model alone); the vision-to-language merger is part
    of the tower and frozen too unless ``train_merger``. Returns the number of frozen elements."""
    return freeze_by_name(model, VISION_PATTERNS, keep=MERGER_PATTERNS if train_merger else ())
