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

Each mode is declared once, by its ``AGGREGATIONS.register`` line (:class:`AggregationEntry`): a reduction
``fn(masked [N, T], mask [N, T] float, agg) -> scalar`` of the per-token loss with padding already 0, and
whether it needs the constant ``max_length``.

Per-token weights (e.g. PAEC soft masks, AEPO's beta_{i,t}) multiply ``l`` before aggregation; they do not
change the denominators. Padding is removed by a select (``torch.where``, as verl's ``masked_sum``), not by
multiplying with the mask, so a NaN or inf at a padded position never reaches the loss, and the gradient
there is 0 (a loss that feeds this a NaN at padding keeps a NaN gradient upstream unless it also selects its
inputs: the policy losses and the KL term do, see :func:`masked_inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ares_cli.algorithms.registry import Entry, Registry
from ares_cli.errors import UsageError

__all__ = [
    "AGGREGATIONS", "AggregationEntry", "AGGREGATION_MODES", "local_counts", "Aggregation", "masked_mean", "select",
    "masked_inputs"
]  # fmt: skip


@dataclass(frozen=True)
class AggregationEntry(Entry):
    """A registered aggregation; ``needs_max_length``: it divides by the constant generation budget."""

    needs_max_length: bool = False


AGGREGATIONS: Registry[AggregationEntry] = Registry("loss aggregation", entry=AggregationEntry)


@AGGREGATIONS.register("token_mean", summary="sum of the per-token loss / N_tok (DAPO's token-level loss)")
def token_mean(masked: Tensor, m: Tensor, agg: Aggregation) -> Tensor:
    return masked.sum() / max(agg.global_tokens, 1.0)


@AGGREGATIONS.register(
    "seq_mean_token_mean", summary="mean over sequences of each one's token mean (GRPO; ARES eq. 2)"
)
def seq_mean_token_mean(masked: Tensor, m: Tensor, agg: Aggregation) -> Tensor:
    per_seq = masked.sum(-1) / m.sum(-1).clamp(min=1.0)
    return per_seq.sum() / max(agg.global_sequences, 1.0)


@AGGREGATIONS.register(
    "seq_sum_constant", needs_max_length=True, summary="sum / (N_seq * L_max), L_max the budget (Dr.GRPO)"
)
def seq_sum_constant(masked: Tensor, m: Tensor, agg: Aggregation) -> Tensor:
    return masked.sum() / (max(agg.global_sequences, 1.0) * float(agg.max_length))


AGGREGATION_MODES = tuple(AGGREGATIONS.names())  # the built-in names (the registry holds any added later)


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
        if AGGREGATIONS.entry(self.mode).needs_max_length and not (self.max_length and self.max_length > 0):
            raise UsageError(f"{self.mode} needs max_length > 0 (the constant generation budget)")
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
        return AGGREGATIONS.get(self.mode)(masked, m, self)

    def mean(self, values: Tensor, mask: Tensor) -> Tensor:
        """Same reduction, for logging a per-token quantity (entropy, kl) consistently with the loss."""
        return self(values, mask)


def select(values: Tensor, keep: Tensor) -> Tensor:
    """``values`` where ``keep``, 0 elsewhere (a select: NaN/inf outside ``keep`` never propagates)."""
    return torch.where(keep.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))


def masked_inputs(mask: Tensor, *tensors: Tensor | None) -> tuple:
    """Each [N, T] tensor with its padded positions set to 0 by a select, before any arithmetic, so that
    neither the loss nor the gradient there can be NaN ([N] tensors and None pass unchanged)."""
    valid = mask.bool()
    return tuple(
        t if t is None or t.dim() != 2 or t.shape != valid.shape else select(t, valid) for t in tensors
    )


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Plain local mean over valid tokens (metrics only; losses must use :class:`Aggregation`)."""
    m = mask.to(values.dtype)
    kept = torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))
    return kept.sum() / m.sum().clamp(min=1.0)
