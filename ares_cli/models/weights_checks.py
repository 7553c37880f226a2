"""A model's safetensors headers checked against its ``config.json``, reading headers only (a few KB each).

:func:`read_header` reads one file's header bounded (a regular file, the 8-byte length at most
:data:`MAX_HEADER_BYTES`, the JSON at most :data:`HEADER_MAX_DEPTH` deep): every entry a known dtype, a
shape of non-negative integers and ``data_offsets`` whose span is exactly the tensor's bytes, the spans
tiling the data region without gaps or overlaps, and the file exactly as long as the header declares
(a truncated copy, or a sparse file longer than its header, is refused). :func:`expected_tensors` derives
every tensor the architecture needs from the checked config (Llama, Qwen2, Qwen2.5-VL, names as
``save_pretrained`` writes them), and :func:`check_weights` compares: none missing, none extra, each at
the config's shape in a floating dtype, the layer count agreeing. Each refusal is an InputError (exit 3)
naming the file and the tensor.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError
from ares_cli.store.untrusted import load_json_bounded, parse_json_bounded, regular_file_size

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit
HEADER_MAX_DEPTH = 4  # {name: {"shape": [..]}} is 3 deep
DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
               "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}  # fmt: skip
WEIGHT_DTYPES = ("F32", "BF16", "F16")  # what the loaders cast from; an integer or FP8 tensor is not a weight
MAX_PARAMS = 2 * 10**12  # past every published dense model: a header beyond it is a lie
INDEX = "model.safetensors.index.json"
ALIASES = (("model.language_model.", "model."), ("model.visual.", "visual."))  # newer save_pretrained names
SPARSE_MIN_BYTES = 64 * 1024 * 1024

Tensors = dict[str, tuple[list[int], str]]


def _entry(name: Any, entry: Any, path: Path) -> tuple[list[int], str, int, int]:
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise InputError(
            f"safetensors header entry {name!r} is not {{dtype, shape, data_offsets}}", file=path
        )
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in DTYPE_BYTES:
        raise InputError(f"tensor {name} has unknown dtype {dtype!r}", file=path)
    if not isinstance(shape, list) or len(shape) > 8 or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in shape):  # fmt: skip
        raise InputError(f"tensor {name} has shape {shape!r}, not a list of non-negative integers", file=path)
    if not (isinstance(offsets, list) and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)):  # fmt: skip
        raise InputError(f"tensor {name} has data_offsets {offsets!r}, not [begin, end]", file=path)
    n = DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    if offsets[1] - offsets[0] != n:
        raise InputError(f"tensor {name}: data_offsets {offsets} span {offsets[1] - offsets[0]} bytes, its "
                         f"{dtype} shape {shape} needs {n}", file=path)  # fmt: skip
    return shape, dtype, offsets[0], offsets[1]


def read_header(path: str | Path) -> Tensors:
    """``{name: (shape, dtype)}`` of one safetensors file, every rule of the module docstring checked."""
    path = Path(path)
    size = regular_file_size(path, what="safetensors file")
    if size < 8:
        raise InputError(f"not a safetensors file ({size} bytes, no header)", file=path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(f"safetensors file cannot be opened ({exc.strerror or exc})", file=path) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise InputError("safetensors file is not a regular file", file=path)
        (n,) = struct.unpack("<Q", fh.read(8))
        if n > min(size - 8, MAX_HEADER_BYTES):
            raise InputError(
                f"corrupt safetensors header (declares {n} header bytes, file has {size})", file=path
            )
        raw = fh.read(n)
    header = parse_json_bounded(raw, source=path, max_depth=HEADER_MAX_DEPTH, what="safetensors header")
    if not isinstance(header, dict):
        raise InputError("corrupt safetensors header (not the JSON table of tensors)", file=path)
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise InputError("safetensors __metadata__ must map names to strings", file=path)
    spans, tensors = [], {}
    for name, entry in header.items():
        shape, dtype, begin, end = _entry(name, entry, path)
        tensors[name] = (shape, dtype)
        spans.append((begin, end, name))
    reached = 0
    for begin, end, name in sorted(spans):
        if begin != reached:
            what = "overlaps another" if begin < reached else f"leaves a gap at byte {reached}"
            raise InputError(f"tensor {name}: data_offsets [{begin}, {end}] {what}", file=path)
        reached = end
    if size != 8 + n + reached:
        what = "truncated" if size < 8 + n + reached else "corrupt"
        raise InputError(
            f"{what} safetensors: header declares {8 + n + reached} bytes, file has {size}", file=path
        )
    return tensors


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files the loaders read: the shards an index names, else every ``*.safetensors``."""
    index = directory / INDEX
    if not os.path.lexists(index):
        return sorted(directory.glob("*.safetensors"))
    data = load_json_bounded(index, max_depth=HEADER_MAX_DEPTH, what="shard index")
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise InputError("corrupt shard index (no weight_map of tensor -> shard file)", file=index)
    shards = sorted(set(weight_map.values()))
    for shard in shards:
        if Path(shard).name != shard or shard in (".", ".."):
            raise InputError(
                f"shard {shard!r} named by the index is not a file name in the directory", file=index
            )
        if not os.path.lexists(directory / shard):
            raise InputError(f"shard {shard} named by the index is missing", file=index)
    return [directory / s for s in shards]


def read_weights(directory: str | Path) -> tuple[Tensors, dict[str, Path]]:
    """Every tensor of the directory's checkpoint (``{name: (shape, dtype)}``) and the file holding each."""
    directory = Path(directory)
    files = weight_files(directory)
    if not files:
        raise InputError("no *.safetensors file (only safetensors checkpoints are read)", file=directory)
    tensors: Tensors = {}
    where: dict[str, Path] = {}
    for path in files:
        for name, value in read_header(path).items():
            if name in where:
                raise InputError(f"tensor {name} is in {where[name].name} too", file=path)
            tensors[name], where[name] = value, path
    index = directory / INDEX
    if os.path.lexists(index):
        weight_map = load_json_bounded(index, max_depth=HEADER_MAX_DEPTH, what="shard index")["weight_map"]
        for name in sorted(set(weight_map) ^ set(tensors)):
            held = (
                f"{where[name].name} holds it but the index omits it"
                if name in where
                else "no shard holds it"
            )
            raise InputError(f"tensor {name}: {held}", file=index)
        for name, shard in weight_map.items():
            if where[name].name != shard:
                raise InputError(
                    f"tensor {name} is in {where[name].name}, the index says {shard}", file=index
                )
    return tensors, where


def _text_tensors(t: dict[str, Any], qkv_bias: bool, o_bias: bool) -> dict[str, list[int]]:
    H, mlp, V, L = t["hidden_size"], t["intermediate_size"], t["vocab_size"], t["num_hidden_layers"]
    q, kv = t["num_attention_heads"] * t["head_dim"], t["num_key_value_heads"] * t["head_dim"]
    out = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H]}
    for i in range(L):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = out[p + "post_attention_layernorm.weight"] = [H]
        for proj, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            out[f"{p}self_attn.{proj}.weight"] = [rows, H]
            if qkv_bias:
                out[f"{p}self_attn.{proj}.bias"] = [rows]
        out[p + "self_attn.o_proj.weight"] = [H, q]
        if o_bias:
            out[p + "self_attn.o_proj.bias"] = [H]
        for proj, shape in (("gate_proj", [mlp, H]), ("up_proj", [mlp, H]), ("down_proj", [H, mlp])):
            out[f"{p}mlp.{proj}.weight"] = shape
            if t["mlp_bias"]:
                out[f"{p}mlp.{proj}.bias"] = shape[:1]
    if not t["tied"]:
        out["lm_head.weight"] = [V, H]
    return out


def _vision_tensors(v: dict[str, Any]) -> dict[str, list[int]]:
    h, inner, merged = (
        v["hidden_size"],
        v["intermediate_size"],
        v["hidden_size"] * v["spatial_merge_size"] ** 2,
    )
    out = {"visual.patch_embed.proj.weight": [h, v["in_channels"], v["temporal_patch_size"], v["patch_size"],
                                              v["patch_size"]],
           "visual.merger.ln_q.weight": [h], "visual.merger.mlp.0.weight": [merged, merged],
           "visual.merger.mlp.0.bias": [merged], "visual.merger.mlp.2.weight": [v["out_hidden_size"], merged],
           "visual.merger.mlp.2.bias": [v["out_hidden_size"]]}  # fmt: skip
    for i in range(v["depth"]):
        p = f"visual.blocks.{i}."
        shapes = {"norm1.weight": [h], "norm2.weight": [h], "attn.qkv.weight": [3 * h, h], "attn.qkv.bias": [3 * h],
                  "attn.proj.weight": [h, h], "attn.proj.bias": [h], "mlp.gate_proj.weight": [inner, h],
                  "mlp.gate_proj.bias": [inner], "mlp.up_proj.weight": [inner, h], "mlp.up_proj.bias": [inner],
                  "mlp.down_proj.weight": [h, inner], "mlp.down_proj.bias": [h]}  # fmt: skip
        out.update({p + k: s for k, s in shapes.items()})
    return out


def expected_tensors(checked: dict[str, Any]) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """``(required, optional)`` tensor shapes for a config checked by ``check_config`` (a tied head may be
    stored: it is optional)."""
    text, kind = checked["text"], checked["model_type"]
    bias = text["attention_bias"]
    required = _text_tensors(text, qkv_bias=bias or kind != "llama", o_bias=bias and kind == "llama")
    if checked["vision"] is not None:
        required |= _vision_tensors(checked["vision"])
    optional = {"lm_head.weight": [text["vocab_size"], text["hidden_size"]]} if text["tied"] else {}
    return required, optional


def canonical(name: str) -> str:
    for alias, plain in ALIASES:
        if name.startswith(alias):
            return plain + name[len(alias) :]
    return name


def _count(names, pattern: str) -> set[int]:
    found = (re.match(pattern, n) for n in names)
    return {int(m.group(1)) for m in found if m}


def _check_depth(names, checked: dict[str, Any], source: Path) -> None:
    pairs = [(r"model\.layers\.(\d+)\.", checked["text"]["num_hidden_layers"], "num_hidden_layers", "layers")]
    if checked["vision"] is not None:
        pairs.append(
            (r"visual\.blocks\.(\d+)\.", checked["vision"]["depth"], "vision_config.depth", "blocks")
        )
    for pattern, want, field, what in pairs:
        found = _count(names, pattern)
        if found != set(range(want)):
            held = f"{what} {min(found)}..{max(found)} ({len(found)})" if found else f"no {what}"
            raise InputError(
                f"config.json says {field} {want} but the weights hold {held}", file=source, field=field
            )


def check_weights(
    checked: dict[str, Any], tensors: Tensors, where: dict[str, Path], config_file: Path
) -> None:
    """Every tensor the checked config needs, at its shape, in a floating dtype; none extra."""
    by_name = {}
    for name, value in tensors.items():
        plain = canonical(name)
        if plain in by_name:
            raise InputError(f"tensor {name} is stored under two names", file=where[name])
        by_name[plain] = (name, value)
    _check_depth(by_name, checked, config_file)
    required, optional = expected_tensors(checked)
    first = next(iter(where.values()))
    missing = sorted(set(required) - set(by_name))
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise InputError(f"tensor {missing[0]}{more} that config.json's {checked['model_type']} needs is missing",
                         file=first if len(set(where.values())) == 1 else first.parent)  # fmt: skip
    total = 0
    for plain, (name, (shape, dtype)) in sorted(by_name.items()):
        want = required.get(plain, optional.get(plain))
        if want is None:
            raise InputError(f"tensor {name} is not part of a {checked['model_type']} model of this config.json",
                             file=where[name])  # fmt: skip
        if shape != want:
            raise InputError(f"tensor {name} has shape {shape}; config.json needs {want}", file=where[name])
        if dtype not in WEIGHT_DTYPES:
            raise InputError(
                f"tensor {name} is {dtype}; weights must be {', '.join(WEIGHT_DTYPES)}", file=where[name]
            )
        n = 1
        for d in shape:
            n *= d
        total += n
    if total > MAX_PARAMS:
        raise InputError(f"the weights declare {total:,} parameters, past {MAX_PARAMS:,}", file=first)


def check_allocated(path: Path) -> None:
    """A weights file whose data was never written (a sparse file: under half its bytes on disk) is refused
    where weights load; ``ares plan`` reads headers only and sizes a header-only checkpoint."""
    info = os.stat(path)
    allocated = getattr(info, "st_blocks", None)
    if allocated is not None and info.st_size >= SPARSE_MIN_BYTES and allocated * 512 < info.st_size // 2:
        raise InputError(f"safetensors file is sparse ({allocated * 512:,} of {info.st_size:,} bytes on disk): "
                         "its tensor data was never written", file=path)  # fmt: skip
