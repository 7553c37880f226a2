"""Structural checks of a local model directory before anything loads it (exit 3 naming the file).

A model given as a plain directory has no manifest to verify against (artifacts are verified by hash, exit
4); these checks catch what would otherwise surface as a traceback deep inside transformers: no tokenizer,
a safetensors file whose header is unreadable or whose tensor data is shorter than its header says
(truncated copy), and a sharded checkpoint whose index names a missing shard. They read headers only
(a few KB per file), never tensor data.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ares_cli.errors import InputError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")  # torch.save / pickle files: never loaded
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit


def safetensors_data_size(path: Path) -> int:
    """Bytes of tensor data a safetensors header declares; InputError if the header is unreadable."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise InputError(f"not a safetensors file ({size} bytes, no header)", file=path)
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, _MAX_HEADER_BYTES):
            raise InputError(
                f"corrupt safetensors header (declares {n} header bytes, file has {size})", file=path
            )
        try:
            header = json.loads(fh.read(n))
            ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            raise InputError(
                "corrupt safetensors header (not the JSON table of tensors)", file=path
            ) from None
    return 8 + n + max(ends, default=0)


def check_model_dir(directory: str | Path) -> None:
    """Raise an InputError (exit 3) naming the file when ``directory`` cannot be a loadable model."""
    directory = Path(directory)
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise InputError(f"model directory has no tokenizer (expected one of {', '.join(TOKENIZER_FILES)})",
                         file=directory)  # fmt: skip
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (ValueError, TypeError, KeyError, AttributeError):
            raise InputError("corrupt shard index (no weight_map)", file=index) from None
        for shard in sorted(shards):
            if not (directory / shard).is_file():
                raise InputError(f"shard {shard} named by the index is missing", file=index)
    weights = sorted(directory.glob("*.safetensors"))
    if not weights and not index.is_file():
        pickled = sorted(p.name for pattern in PICKLE_WEIGHTS for p in directory.glob(pattern))
        if pickled:
            raise InputError(
                f"model directory holds only pickle weights ({', '.join(pickled)}); ares loads safetensors "
                "only and never unpickles a file: save the model with save_pretrained (safetensors) first",
                file=directory,
            )
        if (directory / "config.json").is_file():
            raise InputError("model directory has no weights (expected model.safetensors)", file=directory)
    for path in weights:
        expected, actual = safetensors_data_size(path), path.stat().st_size
        if actual != expected:
            what = "truncated" if actual < expected else "corrupt"
            raise InputError(
                f"{what} safetensors: header declares {expected} bytes, file has {actual}", file=path
            )
