"""Structural checks of a local model directory before anything loads it (exit 3 naming the file).

A model given as a plain directory has no manifest to verify against (artifacts are verified by hash, exit
4); these checks catch what would otherwise surface as a traceback (or a hang) deep inside transformers:
no tokenizer, pickle-only weights, and everything :func:`ares_cli.models.checked_dir.check_model_files`
checks (config.json typed and ranged, safetensors headers against it, regular files of bounded size).
They read headers only (a few KB per file), never tensor data.
"""

from __future__ import annotations

import os
from pathlib import Path

from ares_cli.errors import InputError
from ares_cli.models.checked_dir import check_model_files
from ares_cli.models.weights_checks import INDEX

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")  # torch.save / pickle files: never loaded


def check_model_dir(directory: str | Path, *, loads_weights: bool = False) -> None:
    """Raise an InputError (exit 3) naming the file when ``directory`` cannot be a loadable model;
    ``loads_weights`` (a stage, not ``ares plan``) also refuses a sparse weights file."""
    directory = Path(directory)
    if not any(os.path.lexists(directory / name) for name in TOKENIZER_FILES):
        raise InputError(f"model directory has no tokenizer (expected one of {', '.join(TOKENIZER_FILES)})",
                         file=directory)  # fmt: skip
    if not any(directory.glob("*.safetensors")) and not os.path.lexists(directory / INDEX):
        pickled = sorted(p.name for pattern in PICKLE_WEIGHTS for p in directory.glob(pattern))
        if pickled:
            raise InputError(
                f"model directory holds only pickle weights ({', '.join(pickled)}); ares loads safetensors "
                "only and never unpickles a file: save the model with save_pretrained (safetensors) first",
                file=directory,
            )
        raise InputError("model directory has no weights (expected model.safetensors)", file=directory)
    check_model_files(directory, loads_weights=loads_weights)
