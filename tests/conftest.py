"""Shared fixtures: a tiny random causal LM with the toy tokenizer, and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Tiny test models run fastest on one thread; subprocesses (CLI runs, distributed tests) inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide Llama with the toy tokenizer and chat template (random weights, seed 0)."""
    from ares_cli.toy.model import ModelShape, build_model
    from ares_cli.toy.tokenizer import build_tokenizer

    out = tmp_path_factory.mktemp("tiny-model")
    tokenizer = build_tokenizer()
    model = build_model(
        tokenizer,
        ModelShape(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=256),
        seed=0,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_vl_dir(tmp_path_factory) -> Path:
    """A tiny random Qwen2.5-VL (real transformers class) with tokenizer and processor (seed 0)."""
    from ares_cli.toy.tiny_vl import save_tiny_vl

    out = tmp_path_factory.mktemp("tiny-vl")
    save_tiny_vl(out, seed=0)
    return out


@pytest.fixture(scope="session")
def vl_images(tmp_path_factory) -> list[Path]:
    """Four small PNGs of different sizes and colours (28x28 to 56x56)."""
    from PIL import Image, ImageDraw

    out = tmp_path_factory.mktemp("vl-images")
    paths = []
    for i, (size, color) in enumerate([((28, 28), (255, 0, 0)), ((56, 28), (0, 200, 0)),
                                       ((42, 56), (0, 0, 255)), ((56, 56), (250, 250, 0))]):  # fmt: skip
        img = Image.new("RGB", size, color)
        ImageDraw.Draw(img).rectangle([2, 2, 10 + i, 12], fill=(i * 60, 255 - i * 60, 128))
        paths.append(out / f"img{i}.png")
        img.save(paths[-1])
    return paths


def run_ares(
    *args: str, root: Path, check: bool = True, timeout: float = 600, process: bool = True
) -> subprocess.CompletedProcess:
    """Run ``ares`` with stdout and stderr kept apart: in a fresh interpreter by default; ``process=False``
    runs it in this process (the same app and error mapping as the console entry point, see
    :mod:`cli_runner`), for tests that only need the exit code, the streams and the artifact."""
    if process:
        env = os.environ | {"ARES_ARTIFACTS": str(root), "PYTHONUNBUFFERED": "1"}
        proc = subprocess.run(
            [sys.executable, "-c", "from ares_cli.main import main; main()", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=str(REPO),
        )
    else:
        from cli_runner import invoke_in_process

        proc = invoke_in_process(list(args), env={"ARES_ARTIFACTS": str(root)}, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"ares {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc
