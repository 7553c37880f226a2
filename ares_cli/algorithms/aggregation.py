"""Loss aggregation over tokens with GLOBAL denominators, so any micro-batch / rank split gives the same
gradient as the full batch.

The trainer computes the counts once per optimiser step over every micro-batch on every rank
(:func:`local_counts`, then an all-reduce sum) and builds one :class:`Aggregation`; each micro-batch's loss
is then a partial sum divided by global constants, and the accumulated gradient equals the full-batch one.

Modes (l the per-token loss, m the {0,1} mask, |o_i| = sum_t m_{i,t}):

- ``token_mean`` (DAPO token-level loss): sum_{i,t} m l / N_tok, N_tok the global token count.
- ``seq_mean_token_mean`` (GRPO / ARES eq. 2's 1/G sum_i 1/|o_i| sum_t): sum_i (sum_t m l / |o_i|) / N_seq,
  N_seq the global count of sequences (with at least one token, see :func:`local_counts`).
- ``seq_sum_constant`` (Dr.GRPO): sum_{i,t} m l / (N_seq * L_max), L_max a constant (the generation budget).

Per-token weights (e.g. PAEC soft masks, AEPO's beta_{i,t}) multiply ``l`` before aggregation; they do not
change the denominators. Padding is removed by a select (``torch.where``, as verl's ``masked_sum``), not by
multiplying with the mask, so a NaN or inf at a padded position never reaches the loss or its gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ares_cli.errors import UsageError

__all__ = ["AGGREGATION_MODES", "local_counts", "Aggregation", "masked_mean"]

AGGREGATION_MODES = ("token_mean", "seq_mean_token_mean", "seq_sum_constant")


def local_counts(mask: Tensor) -> dict[str, float]:
    """Token and sequence counts of one micro-batch's mask [N, T]; sum them over micro-batches and ranks.

    A sequence with no valid token is not counted (it contributes nothing to any mode)."""
    m = mask.detach().float()
    return {"tokens": float(m.sum()), "sequences": float((m.sum(-1) > 0).sum())}


@dataclass(frozen=True)
class Aggregation:
    """Reduce a per-token loss [N, T] to a scalar with global denominators (see module docstring)."""

    mode: str
    global_tokens: float
    global_sequences: float
    max_length: int | None = None

    def __post_init__(self):
        if self.mode not in AGGREGATION_MODES:
            raise UsageError(f"unknown aggregation {self.mode!r}; valid: {', '.join(AGGREGATION_MODES)}")
        if self.mode == "seq_sum_constant" and not (self.max_length and self.max_length > 0):
            raise UsageError("seq_sum_constant needs max_length > 0 (the constant generation budget)")
        if self.global_tokens < 0 or self.global_sequences < 0:
            raise UsageError("global counts must be >= 0")

    @classmethod
    def from_mask(cls, mode: str, mask: Tensor, max_length: int | None = None) -> Aggregation:
        """Single-process convenience: global counts taken from this (full-batch) mask."""
        c = local_counts(mask)
        return cls(mode, c["tokens"], c["sequences"], max_length)

    def __call__(self, per_token: Tensor, mask: Tensor) -> Tensor:
        if per_token.shape != mask.shape or per_token.dim() != 2:
            raise ValueError(
                f"per-token loss {tuple(per_token.shape)} and mask {tuple(mask.shape)} must be [N, T]"
            )
        m = mask.to(per_token.dtype)
        masked = torch.where(
            mask.bool(), per_token, torch.zeros((), dtype=per_token.dtype, device=per_token.device)
        )
        if self.mode == "token_mean":
            return masked.sum() / max(self.global_tokens, 1.0)
        if self.mode == "seq_mean_token_mean":
            per_seq = masked.sum(-1) / m.sum(-1).clamp(min=1.0)
            return per_seq.sum() / max(self.global_sequences, 1.0)
        return masked.sum() / (max(self.global_sequences, 1.0) * float(self.max_length))

    def mean(self, values: Tensor, mask: Tensor) -> Tensor:
        """Same reduction, for logging a per-token quantity (entropy, kl) consistently with the loss."""
        return self(values, mask)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Plain local mean over valid tokens (metrics only; losses must use :class:`Aggregation`)."""
    m = mask.to(values.dtype)
    kept = torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))
    return kept.sum() / m.sum().clamp(min=1.0)
