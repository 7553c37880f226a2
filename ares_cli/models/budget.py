"""Generation budgets that fit the model: the user's, else the model's own, else the stage's paper default.

A budget the user set (flag, ``--set``, YAML or a suite file) is used as given, and one that leaves no room
for a prompt in the model's context stays a usage error (exit 2). An unset budget comes from the model's
``generation_config.json`` ``max_new_tokens`` when it has one (the Hugging Face convention: the shipped
toy models carry a budget that fits their 640-token context), else from the stage's paper default. The
resolved number keys the artifact exactly as the same number given explicitly would, and the stage records
which of the three set it (``stats.generation_budget``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SOURCES = ("config", "model", "default")
SOURCE_TEXT = {
    "config": "set explicitly (flag, --set, YAML or suite file)",
    "model": "from the model's generation_config.json",
    "default": "the stage's paper default",
}


@dataclass(frozen=True)
class Budget:
    """A resolved generation budget and where it came from (one of :data:`SOURCES`)."""

    max_new_tokens: int
    source: str

    def record(self) -> dict:
        """The manifest entry: ``{"max_new_tokens": N, "source": "model"}``."""
        return {"max_new_tokens": self.max_new_tokens, "source": self.source}

    def describe(self) -> str:
        return f"max_new_tokens {self.max_new_tokens} ({SOURCE_TEXT[self.source]})"


def model_max_new_tokens(model_path: str | Path | None) -> int | None:
    """``max_new_tokens`` of the model's ``generation_config.json`` (a local directory, or a hub id in the
    local cache); None when the model has no such file or sets no positive integer there."""
    if model_path is None:
        return None
    local = Path(model_path) / "generation_config.json"
    value = None
    if local.is_file():
        try:
            value = json.loads(local.read_text()).get("max_new_tokens")
        except (json.JSONDecodeError, AttributeError):
            return None
    elif not Path(model_path).exists():
        try:
            from transformers import GenerationConfig

            value = GenerationConfig.from_pretrained(str(model_path), local_files_only=True).max_new_tokens
        except (OSError, ValueError):
            return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def resolve_budget(requested: int | None, model_path: str | Path | None, paper_default: int) -> Budget:
    """The budget a stage generates with: ``requested`` when set, else the model's, else ``paper_default``."""
    if requested is not None:
        return Budget(int(requested), "config")
    from_model = model_max_new_tokens(model_path)
    if from_model is not None:
        return Budget(from_model, "model")
    return Budget(int(paper_default), "default")


def with_budget(cfg, model_path: str | Path | None, paper_default: int):
    """``(cfg with its max_new_tokens resolved, Budget)`` for a frozen sampling config."""
    from dataclasses import replace

    budget = resolve_budget(cfg.max_new_tokens, model_path, paper_default)
    return replace(cfg, max_new_tokens=budget.max_new_tokens), budget


def model_context(model_path: str | Path | None) -> int | None:
    """Tokens the model attends to (``max_position_embeddings``, a VLM's text config where the top level
    lacks it); None when unknown."""
    if model_path is None:
        return None
    from ares_cli.models.loading import model_config

    config = model_config(model_path)
    for section in (config, config.get("text_config") or {}):
        for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = section.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def check_fits(budget: Budget, window: int | None, *, flag: str = "--max-new-tokens") -> None:
    """A UsageError (exit 2) when ``budget`` leaves no room for a prompt in a ``window``-token context."""
    from ares_cli.errors import UsageError

    if window is not None and budget.max_new_tokens >= window:
        raise UsageError(
            f"max_new_tokens {budget.max_new_tokens} leaves no room for a prompt in the model's {window}-token "
            f"context ({SOURCE_TEXT[budget.source]}; use {flag} below {window})"
        )


SFT_SEQ_LEN = 32768  # ARES's cold-start sequence length


def resolve_seq_len(requested: int | None, window: int | None) -> tuple[int, str]:
    """SFT's truncation length: ``requested`` when set (past the model's context it is a UsageError), else
    ARES's 32k capped at the context. Returns ``(tokens, source)``."""
    from ares_cli.errors import UsageError

    if requested is not None:
        if window is not None and requested > window:
            raise UsageError(
                f"max_seq_len {requested} exceeds the model's {window}-token context "
                f"(use --set max_seq_len={window} or less)"
            )
        return int(requested), "config"
    if window is not None and window < SFT_SEQ_LEN:
        return window, "model"
    return SFT_SEQ_LEN, "default"
