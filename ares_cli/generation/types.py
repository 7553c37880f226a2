"""Shared generation types: sampling parameters, requests, completions, the backend protocol, seeds."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ares_cli.errors import UsageError

FINISH_REASONS = ("stop", "length")
_SEED_MASK = (1 << 63) - 1


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. temperature 0 means greedy; `max_new_tokens` is always explicit."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = field(kw_only=True)
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        mnt = self.max_new_tokens
        if isinstance(mnt, bool) or not isinstance(mnt, int) or mnt < 1:
            raise UsageError(f"max_new_tokens must be a positive integer, got {mnt!r}")
        if not self.temperature >= 0:
            raise UsageError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"top_p must be in (0, 1], got {self.top_p!r}")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        if any(not isinstance(s, str) or not s for s in stop):
            raise UsageError(f"stop strings must be non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", stop)


@dataclass(frozen=True)
class GenerationRequest:
    """One rendered prompt and one seed per sample (n = len(seeds)); `key` is the problem id for replay.

    `images` are the prompt's image paths, in the order of its image placeholders."""

    prompt: str
    seeds: tuple[int, ...]
    key: str = ""
    images: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "images", tuple(str(p) for p in self.images))
        seeds = tuple(self.seeds)
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 or s > _SEED_MASK for s in seeds):
            raise UsageError(f"seeds must be integers in [0, 2**63), got {self.seeds!r}")
        object.__setattr__(self, "seeds", seeds)

    @property
    def n(self) -> int:
        return len(self.seeds)


@dataclass
class Completion:
    """One sampled continuation. `finish_reason` is "stop" (EOS or stop string) or "length".

    `logprobs` are the model's log-probabilities of the sampled tokens (raw distribution, before
    temperature/top-p, like vLLM's default) where the backend has them. `token_count` is only set when
    token ids are unavailable (replay files that record `n_tokens`).
    """

    text: str
    token_ids: list[int]
    finish_reason: str
    logprobs: list[float] | None = None
    token_count: int | None = None

    @property
    def n_tokens(self) -> int:
        return (
            self.token_count if self.token_count is not None and not self.token_ids else len(self.token_ids)
        )


BatchDone = Callable[[list[tuple[int, int, "Completion"]]], None]
"""A backend's ``on_batch`` callback: the (request index, seed index, completion) rows of a finished batch."""


@runtime_checkable
class Backend(Protocol):
    """What every generation backend provides."""

    name: str

    def generate(self, requests: list[GenerationRequest], sampling: SamplingParams) -> list[list[Completion]]:
        """Per request, one completion per seed, in seed order."""
        ...


@runtime_checkable
class WeightSyncBackend(Backend, Protocol):
    """A backend whose weights an RL trainer can replace in place."""

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> None: ...

    def sync_weights(self, model: Any) -> None: ...


def seed_for(base_seed: int, problem_id: str, sample_idx: int) -> int:
    """Stable 63-bit seed for one (problem, sample): the same across processes, platforms and resumes."""
    digest = hashlib.sha256(f"{int(base_seed)}\x1f{problem_id}\x1f{int(sample_idx)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & _SEED_MASK
