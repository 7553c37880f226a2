"""Online difficulty buckets from a group's pass count (ARES appendix G, eq. 9-10).

Buckets are integer codes ``EASY, MEDIUM, HARD`` (names in ``BUCKETS``), shared by AEPO's reward and KL, the
passrate stage and entropy-triggered branching.
"""

from __future__ import annotations

import math

import torch

from ares_cli.errors import UsageError

__all__ = ["EASY", "MEDIUM", "HARD", "BUCKETS", "bucket_bounds", "difficulty_bucket", "bucket_ids"]

EASY, MEDIUM, HARD = 0, 1, 2
BUCKETS: tuple[str, str, str] = ("easy", "medium", "hard")


def bucket_bounds(n: int, easy_frac: float = 0.75, hard_frac: float = 0.25) -> tuple[int, int]:
    """(easy_min, hard_max) correct counts for a group of n: easy iff c >= ceil(easy_frac n), hard iff
    c <= floor(hard_frac n) (eq. 10 for n = 8: easy >= 6, hard <= 2, medium 3-5)."""
    if n < 1:
        raise UsageError(f"group size must be >= 1, got {n}")
    easy_min = math.ceil(easy_frac * n - 1e-9)
    hard_max = math.floor(hard_frac * n + 1e-9)
    return easy_min, min(hard_max, easy_min - 1)


def difficulty_bucket(n_correct: int, n: int, easy_frac: float = 0.75, hard_frac: float = 0.25) -> str:
    """Online difficulty bucket of a prompt from its group pass count (appendix G, eq. 9-10).

    n = 8: >= 6 correct "easy", 3-5 "medium", <= 2 "hard". Other n: k-of-n rules scaled from the same
    fractions (:func:`bucket_bounds`), e.g. n = 4: easy >= 3, medium 2, hard <= 1; n = 16: 12 / 5-11 / 4.
    """
    if not 0 <= n_correct <= n:
        raise UsageError(f"n_correct must lie in [0, {n}], got {n_correct}")
    easy_min, hard_max = bucket_bounds(n, easy_frac, hard_frac)
    if n_correct >= easy_min:
        return "easy"
    if n_correct <= hard_max:
        return "hard"
    return "medium"


def bucket_ids(
    n_correct: torch.Tensor, n: torch.Tensor | int, easy_frac: float = 0.75, hard_frac: float = 0.25
) -> torch.Tensor:
    """Vectorised :func:`difficulty_bucket`: long tensor of EASY / MEDIUM / HARD codes (eq. 10)."""
    nc = torch.as_tensor(n_correct)
    nn = torch.as_tensor(n, device=nc.device).expand_as(nc)
    out = torch.empty(nc.shape, dtype=torch.long, device=nc.device)
    for idx, (c, k) in enumerate(zip(nc.reshape(-1).tolist(), nn.reshape(-1).tolist(), strict=True)):
        out.view(-1)[idx] = BUCKETS.index(difficulty_bucket(int(c), int(k), easy_frac, hard_frac))
    return out
