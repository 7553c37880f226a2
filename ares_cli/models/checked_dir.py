"""The one check of a local model directory, run by every stage and by ``ares plan`` before anything loads.

:func:`check_model_files` reads the directory's ``config.json`` (:mod:`.config_checks`) and its safetensors
headers (:mod:`.weights_checks`) and checks them against each other; the files the tokenizer, processor and
generation config are read from must be regular files of bounded size (a FIFO named ``tokenizer.json``
would block the loader forever). Nothing here reads tensor data: a check costs a few KB of reads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError
from ares_cli.models.config_checks import load_config
from ares_cli.models.weights_checks import Tensors, check_allocated, check_weights, read_weights
from ares_cli.store.untrusted import MAX_JSON_BYTES, regular_file_size

SIDE_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "added_tokens.json", "chat_template.jinja", "chat_template.json", "preprocessor_config.json",
              "processor_config.json", "video_preprocessor_config.json", "vocab.json", "merges.txt",
              "tokenizer.model", "spiece.model")  # fmt: skip


def check_side_files(directory: Path) -> None:
    """Each file a loader opens by name, where present, is a regular file of at most 64 MiB."""
    for name in SIDE_FILES:
        path = directory / name
        if os.path.lexists(path):
            size = regular_file_size(path, what=name)
            if size > MAX_JSON_BYTES:
                raise InputError(
                    f"{name} is {size:,} bytes, over the {MAX_JSON_BYTES:,}-byte limit", file=path
                )


def check_model_files(
    directory: str | Path, *, loads_weights: bool = False
) -> tuple[dict[str, Any], Tensors]:
    """``(config, {tensor: (shape, dtype)})`` of the model directory, every rule checked; InputError (exit 3)
    naming the file and the field or tensor otherwise. ``loads_weights`` (a stage, not ``plan``) also
    refuses a sparse weights file, whose tensor data was never written."""
    directory = Path(directory)
    config, checked = load_config(directory)
    check_side_files(directory)
    tensors, where = read_weights(directory)
    check_weights(checked, tensors, where, directory / "config.json")
    if loads_weights:
        for path in sorted(set(where.values())):
            check_allocated(path)
    return config, tensors
