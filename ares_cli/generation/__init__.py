"""Generation backends behind one interface: `hf` (transformers + KV cache), `vllm` (GPU), `replay` (files).

Importing this package is cheap: torch, transformers and vllm load when a backend is constructed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from ares_cli.errors import UsageError
from ares_cli.generation.prompts import render_prompt
from ares_cli.generation.types import (
    Backend,
    Completion,
    GenerationRequest,
    SamplingParams,
    WeightSyncBackend,
    seed_for,
)

BACKENDS = ("auto", "hf", "vllm", "replay")

__all__ = [
    "BACKENDS",
    "Backend",
    "Completion",
    "GenerationRequest",
    "SamplingParams",
    "WeightSyncBackend",
    "get_backend",
    "render_prompt",
    "resolve_backend_name",
    "seed_for",
]


def vllm_available() -> bool:
    """True when vllm is importable and a CUDA device is visible."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def resolve_backend_name(name: str) -> str:
    """Map `auto` to `vllm` (importable and CUDA present) or `hf`; reject unknown names."""
    if name not in BACKENDS:
        raise UsageError(f"unknown generation backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "auto":
        return "vllm" if vllm_available() else "hf"
    return name


def get_backend(name: str, model: str | Path | None, **options: Any) -> Backend:
    """Construct a backend. For `replay`, `model` (or `path=`) is the completions JSONL."""
    resolved = resolve_backend_name(name)
    if resolved == "hf":
        from ares_cli.generation.hf import HFBackend as cls
    elif resolved == "vllm":
        from ares_cli.generation.vllm_backend import VLLMBackend as cls
    else:
        from ares_cli.generation.replay import ReplayBackend as cls

        if model is None:
            model = options.pop("path", None)
    try:
        return cls(model, **options)
    except TypeError as e:
        if "unexpected keyword argument" in str(e):
            raise UsageError(f"{resolved} backend: {e}") from e
        raise
