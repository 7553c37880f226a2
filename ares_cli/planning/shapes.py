"""A model's shapes from its ``config.json`` and safetensors headers, never its weights.

Parameter counts come from the headers (each tensor's shape, read bounded and checked against the config by
:func:`ares_cli.models.checked_dir.check_model_files`, which reads no tensor data): exact, including biases, norms and a vision
tower. The dimensions the memory estimate needs (vocabulary, width, MLP width, layers, heads, key/value
heads, head width) come from ``config.json`` (a vision-language model's ``text_config``), and are checked
against the embedding's header shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError
from ares_cli.models.checked_dir import check_model_files
from ares_cli.models.weights_checks import DTYPE_BYTES

VISION_PARTS = ("visual", "vision_tower", "vision_model")


@dataclass(frozen=True)
class ModelShape:
    """What the memory estimate reads of a model (pure data)."""

    architecture: str
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    context: int | None
    params: int  # every parameter once (a tied lm_head is the embedding)
    vision_params: int = 0  # parameters of the vision tower (frozen in SFT by default)
    merger_params: int = 0  # of the vision-to-language merger (inside the tower)
    largest_module_params: int = 0  # DeepSpeed ZeRO-3's "largest layer": most parameters held by one module
    vision: tuple[int, int, int, int, int] = (
        0,
        0,
        0,
        0,
        1,
    )  # tower (hidden, MLP width, blocks, heads, merge)
    checkpoint_dtype: str = "BF16"  # the dtype most of the checkpoint's bytes are stored in
    checkpoint_bytes: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config (a VLM's ``text_config``, else the config itself)."""
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def shape_from_files(config: dict[str, Any], tensors: dict[str, tuple[list[int], str]]) -> ModelShape:
    """A :class:`ModelShape` from a parsed ``config.json`` and the header tensors (pure)."""
    text = text_config(config)
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")
               if not isinstance(text.get(k), int)]  # fmt: skip
    if missing:
        raise InputError(f"config.json lacks {', '.join(missing)}", field=missing[0])
    hidden, heads = text["hidden_size"], text["num_attention_heads"]
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    counted = {n: t for n, t in tensors.items() if not (tied and n.endswith("lm_head.weight"))}
    per_module: dict[str, int] = {}
    for name, (shape, _) in counted.items():
        module = name.rsplit(".", 1)[0]
        per_module[module] = per_module.get(module, 0) + numel(shape)
    by_dtype: dict[str, int] = {}
    for shape, dtype in counted.values():
        by_dtype[dtype] = by_dtype.get(dtype, 0) + numel(shape) * DTYPE_BYTES.get(dtype, 4)
    vision = [n for n in counted if any(part in n.split(".") for part in VISION_PARTS)]
    shape = ModelShape(
        architecture=(config.get("architectures") or [config.get("model_type", "?")])[0],
        vocab=text["vocab_size"], hidden=hidden,
        intermediate=int(text.get("intermediate_size") or 4 * hidden), layers=text["num_hidden_layers"],
        heads=heads, kv_heads=int(text.get("num_key_value_heads") or heads),
        head_dim=int(text.get("head_dim") or hidden // heads), tied=tied,
        context=_context(text), params=sum(numel(s) for s, _ in counted.values()),
        vision_params=sum(numel(counted[n][0]) for n in vision),
        merger_params=sum(numel(counted[n][0]) for n in vision if "merger" in n.split(".")),
        largest_module_params=max(per_module.values(), default=0), vision=_vision_dims(config) if vision else (0, 0, 0, 0, 1),
        checkpoint_dtype=max(by_dtype, key=by_dtype.get) if by_dtype else "BF16",
        checkpoint_bytes=sum(by_dtype.values()),
    )  # fmt: skip
    _check_embedding(shape, counted)
    return shape


def _vision_dims(config: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """A vision tower's (hidden, MLP width, blocks, heads, spatial merge) from ``vision_config`` (Qwen2-VL's
    names: ``embed_dim`` / ``hidden_size``, ``depth``, ``num_heads``, ``spatial_merge_size``)."""
    v = config.get("vision_config") or {}
    hidden = int(v.get("hidden_size") or v.get("embed_dim") or 0)
    mlp = int(v.get("intermediate_size") or hidden * int(v.get("mlp_ratio") or 4))
    return (
        hidden,
        mlp,
        int(v.get("depth") or 0),
        int(v.get("num_heads") or 1),
        int(v.get("spatial_merge_size") or 1),
    )


def _context(text: dict[str, Any]) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _check_embedding(shape: ModelShape, tensors: dict[str, tuple[list[int], str]]) -> None:
    """The input embedding's header shape must be [vocab_size, hidden_size] of the config."""
    embeds = [n for n in tensors if n.endswith("embed_tokens.weight")]
    for name in embeds:
        found = tensors[name][0]
        if found != [shape.vocab, shape.hidden]:
            raise InputError(
                f"config.json says vocab_size {shape.vocab}, hidden_size {shape.hidden} but tensor {name} is "
                f"{found}", field="vocab_size",
            )  # fmt: skip


def read_model_shape(model_path: str) -> ModelShape:
    """The shape of the model at ``model_path`` (a directory, or a hub id in the local cache)."""
    directory = Path(model_path)
    if not directory.is_dir():
        directory = _cached_snapshot(model_path)
    config, tensors = check_model_files(directory)  # config.json and headers checked (exit 3 naming the file)
    try:
        return shape_from_files(config, tensors)
    except InputError as err:
        if err.file is None:
            raise InputError(str(err), file=directory / "config.json") from None
        raise


def _cached_snapshot(model_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(model_id, local_files_only=True, allow_patterns=["*.json", "*.safetensors"])
        )
    except Exception as err:  # LocalEntryNotFoundError and friends: not in the local cache
        raise InputError(f"model {model_id} is not in the local cache ({type(err).__name__})") from None
