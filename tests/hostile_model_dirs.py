"""Builders for tests/test_hostile_models.py: the toy base model's directory with one thing changed (its
config, its safetensors header, its weights file), and the alarm-guarded ``ares`` call whose
:class:`ModelInputHang` tests/hostile_tally.py counts as a hang."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

from cli_runner import invoke_under_alarm

REPO = Path(__file__).resolve().parents[1]
TOY = REPO / "ares_cli" / "toy" / "base"
VL = REPO / "ares_cli" / "toy" / "vl_base"
SIDE = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja")
HANG_AFTER_S = 60  # a refusal takes well under a second; the first call of a session imports torch
REFUSED_WITHIN_S = 5
GIB = 2**30


class ModelInputHang(Exception):
    """An ``ares`` call that did not return within :data:`HANG_AFTER_S`."""


def _ares(root: Path, *args: str):
    return invoke_under_alarm(
        ["--artifacts-root", str(root), *args], seconds=HANG_AFTER_S, hang=ModelInputHang
    )


def assert_refused(proc, *named: str, code: int = 3) -> None:
    """Exit ``code``, no traceback, and an ``error:`` line on stderr holding each of ``named``."""
    told = proc.stdout + proc.stderr
    assert "Traceback" not in told, told[-2000:]
    assert proc.returncode == code, told[-2000:]
    errors = " ".join(proc.stderr.split())
    assert "error" in errors.lower(), told[-2000:]
    for words in named:
        assert words in errors, (words, proc.stderr[-2000:])


def toy_config() -> dict:
    return json.loads((TOY / "config.json").read_text())


def toy_tensors() -> dict[str, tuple[list[int], str]]:
    raw = (TOY / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    return {k: (v["shape"], v["dtype"]) for k, v in header.items()}


def header_bytes(tensors: dict, *, widths=None) -> tuple[bytes, int]:
    """A safetensors header for ``{name: (shape, dtype)}`` and the data bytes it declares."""
    widths = widths or {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "F8_E4M3": 1}
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (shape, dtype) in tensors.items():
        n = widths.get(dtype, 4)
        plain = isinstance(shape, list) and all(isinstance(d, int) and 0 <= d < 2**20 for d in shape)
        for d in shape if plain else ():  # a hostile shape gets 4 bytes: its entry is refused first
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    return text + b" " * (-len(text) % 8), offset


def write_weights(path: Path, tensors: dict) -> None:
    """A safetensors file for ``tensors``; its data region zeros (written, not a sparse hole)."""
    text, data = header_bytes(tensors)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text)
        fh.truncate(8 + len(text) + data)  # a few MB: under the size a stage calls sparse


def model_dir(tmp: Path, *, config=None, raw_config: bytes | None = None, tensors=None, weights=True) -> Path:
    """The toy base model in ``tmp/model`` with its config, tensors or weights file replaced."""
    out = tmp / "model"
    out.mkdir(parents=True)
    for name in SIDE:
        shutil.copyfile(TOY / name, out / name)
    if raw_config is None:
        raw_config = json.dumps(toy_config() if config is None else config).encode()
    (out / "config.json").write_bytes(raw_config)
    if tensors is not None:
        write_weights(out / "model.safetensors", tensors)
    elif weights:
        shutil.copyfile(TOY / "model.safetensors", out / "model.safetensors")
    return out


def edited(**changes) -> dict:
    config = toy_config()
    for key, value in changes.items():
        if value is DROP:
            config.pop(key, None)
        else:
            config[key] = value
    return config


DROP = object()


# --- hostile files put into a model directory, and the plan that must refuse them


def plan_eval(tmp: Path, model: Path):
    return _ares(
        tmp / "root",
        "plan",
        "eval",
        "--model",
        str(model),
        "--suite",
        "toy",
        "--limit",
        "2",
        "--max-new-tokens",
        "64",
    )


def _config_file(kind: str, path: Path) -> None:
    path.unlink()
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge-sparse":
        with path.open("wb") as fh:
            fh.truncate(5 * GIB)
    elif kind == "device":
        path.symlink_to("/dev/zero")


def _weights_file(kind: str, path: Path) -> str:
    """Replace the weights file with a hostile ``kind``; the words its refusal must hold."""
    path.unlink()
    if kind == "directory":
        path.mkdir()
        return "a directory"
    if kind == "fifo":
        os.mkfifo(path)
        return "FIFO"
    if kind == "sparse-huge":  # 8 GiB of holes: the length prefix reads 0, an empty header
        with path.open("wb") as fh:
            fh.truncate(8 * GIB)
        return "not valid JSON"
    path.symlink_to("/dev/zero")  # a character device
    return "character device"


def _index(model: Path, weight_map) -> None:
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )


def _all_in(shard: str) -> dict:
    return dict.fromkeys(toy_tensors(), shard)
