"""PAEC: Position-Aware Entropy Calibration (PAEC paper section 3, algorithm 1, appendices A.2 and B).

Per response position i (all from one softmax, :func:`~ares_cli.algorithms.token_stats.token_stats`):

- nucleus V_i^(p) (p = 0.85, at most 10 000 tokens) and its renormalised distribution π' (eq. 5);
- local entropy H'_i over the nucleus (eq. 6) — the only quantity that carries gradient;
- s1 = H' / (log|V^(p)| + ε) (eq. 7), s2 = 2σ(−Δ) with Δ the top-two log-gap (eq. 8);
- score s = sg(s1 + β s2) (eq. 9), per-response ρ-quantile τ and soft mask m = σ(κ(s − τ)) (eq. 10);
- masked entropy H̄ (eq. 11), anchor H0 (eq. 12, :class:`~ares_cli.algorithms.controllers.EntropyAnchor`),
  H_low = ρ_min H0, penalty [max(0, H_low − H̄)]² (eq. 13), loss term −α H̄ + λ_ent penalty (eq. 15).

Edge cases (the formulas leave them open): a one-token nucleus has H' = 0 and log|V^(p)| = 0, so s1 =
0 / ε = 0; it has no second candidate under π' (π'^(2) = 0, Δ = +∞), so s2 = 0 — a certain position is
never "competitive". A response with one valid token has τ = its own score, so m = σ(0) = 0.5; padding
gets m = 0 and never enters a quantile or a sum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import torch

from ares_cli.algorithms.aepo import masked_row_quantile
from ares_cli.algorithms.token_stats import TokenStats, token_stats
from ares_cli.config import option
from ares_cli.errors import UsageError

__all__ = [
    "AllReduce", "PAECConfig", "PositionScores", "scores_from_stats", "position_scores_from_stats",
    "position_scores", "soft_mask", "position_mask", "masked_entropy_sums", "masked_entropy",
    "lower_bound_penalty", "PAECLoss", "paec_loss"
]  # fmt: skip

AllReduce = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class PAECConfig:
    """Every PAEC constant with the paper's default (table 4, sec. 5.5); see docs/methods.md."""

    top_p: float = option(0.85, "Nucleus mass p of eq. 5 (peak_prob_p).")
    top_k: int = option(10000, "Cap on the nucleus size (peak_prob_topk).")
    beta: float = option(0.3, "Weight β of the competition score s2 in eq. 9.")
    quantile: float = option(0.8, "Per-response quantile ρ of the score threshold τ (eq. 10).")
    sharpness: float = option(12.0, "κ of the soft mask σ(κ(s − τ)) (eq. 10).")
    soft_mask: bool = option(
        True, "Position-aware soft mask (eq. 10); false = m ≡ 1 on every response token (table 2)."
    )
    alpha: float = option(8e-4, "α: weight of the masked entropy bonus (eq. 15).")
    lambda_ent: float = option(0.004, "λ_ent: weight of the lower-bound penalty (eq. 15).")
    anchor_steps: int = option(4, "K: steps averaged into the anchor H0 (eq. 12).")
    hbar_scope: str = option(
        "step",
        'Rows of the H̄ value and penalty gate: "step" (alg. 1 l. 20) or "minibatch" (per optimiser step).',
    )
    rho_min: float = option(0.8, "H_low = ρ_min H0 (not given by the paper; our choice, see docs).")
    score_eps: float = option(1e-6, "ε of s1 (eq. 7).")
    mask_eps: float = option(1e-6, "ε of the masked-entropy denominator (eq. 11).")

    def __post_init__(self) -> None:
        if not 0.0 < self.top_p <= 1.0:
            raise UsageError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.top_k < 1 or self.anchor_steps < 1:
            raise UsageError("top_k and anchor_steps must be >= 1")
        if not 0.0 <= self.quantile <= 1.0:
            raise UsageError(f"quantile must lie in [0, 1], got {self.quantile}")
        if not 0.0 < self.rho_min < 1.0:
            raise UsageError(f"rho_min must lie in (0, 1), got {self.rho_min}")
        if self.hbar_scope not in ("step", "minibatch"):
            raise UsageError(f"unknown hbar_scope {self.hbar_scope!r}; valid: step, minibatch")
        if self.sharpness <= 0:
            raise UsageError("sharpness must be > 0")

    @classmethod
    def field_help(cls) -> dict[str, str]:
        """Field name -> default, for docs and ``--help`` listings."""
        return {f.name: repr(f.default) for f in fields(cls)}


@dataclass(frozen=True)
class PositionScores:
    """Per-position PAEC quantities, each [N, T]. Only ``local_entropy`` carries gradient."""

    local_entropy: torch.Tensor  # H' (eq. 6)
    s1: torch.Tensor  # normalised local entropy (eq. 7), detached
    s2: torch.Tensor  # decision-competition score (eq. 8), detached
    score: torch.Tensor  # s = sg(s1 + β s2) (eq. 9)
    nucleus_size: torch.Tensor  # |V^(p)| (int64)


def scores_from_stats(
    nucleus_entropy: torch.Tensor,
    nucleus_size: torch.Tensor,
    top2_gap: torch.Tensor,
    beta: float = 0.3,
    eps: float = 1e-6,
) -> PositionScores:
    """s1 (eq. 7), s2 (eq. 8) and the detached score s (eq. 9) from precomputed nucleus statistics.

    s1 = H' / (log|V^(p)| + ε); s2 = 2σ(−Δ), and s2 = 0 when |V^(p)| = 1 (no second candidate in π').
    The gap under π' equals the full-distribution gap whenever both candidates are in the nucleus.
    """
    h = nucleus_entropy.detach()
    size = nucleus_size.to(h.dtype)
    s1 = h / (torch.log(size.clamp(min=1.0)) + eps)
    gap = top2_gap.detach().to(h.dtype)
    s2 = torch.where(nucleus_size >= 2, 2.0 * torch.sigmoid(-gap), torch.zeros_like(h))
    return PositionScores(nucleus_entropy, s1, s2, (s1 + beta * s2).detach(), nucleus_size)


def position_scores_from_stats(stats: TokenStats, beta: float = 0.3, eps: float = 1e-6) -> PositionScores:
    """:func:`scores_from_stats` on a :class:`TokenStats` the trainer already computed (one softmax)."""
    if stats.nucleus_entropy is None or stats.nucleus_size is None or stats.top2_gap is None:
        raise UsageError("PAEC needs token_stats with nucleus_entropy, nucleus_size and top2_gap")
    return scores_from_stats(stats.nucleus_entropy, stats.nucleus_size, stats.top2_gap, beta, eps)


def position_scores(
    logits: torch.Tensor,
    top_p: float = 0.85,
    beta: float = 0.3,
    top_k: int = 10000,
    *,
    temperature: float = 1.0,
    eps: float = 1e-6,
    chunk_size: int = 128,
) -> PositionScores:
    """Position-aware scores from response logits [N, T, V] (eq. 5-9), via one chunked token_stats pass.

    ``local_entropy`` keeps the gradient of H' with respect to ``logits``; s1, s2 and score are detached.
    """
    targets = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
    stats = token_stats(
        logits,
        targets,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        chunk_size=chunk_size,
        stats=("nucleus_entropy", "nucleus_size", "top2_gap"),
    )
    return position_scores_from_stats(stats, beta, eps)


def soft_mask(
    score: torch.Tensor, mask: torch.Tensor, quantile: float = 0.8, sharpness: float = 12.0
) -> torch.Tensor:
    """Soft mask m_i = σ(κ(s_i − τ)) with τ the ρ-quantile of the response's own scores (eq. 10).

    τ is per response over its valid positions (linear interpolation); padding gets m = 0. Detached.
    """
    s = score.detach()
    tau, _ = masked_row_quantile(s, mask, quantile)
    m = torch.sigmoid(sharpness * (s - tau[:, None]))
    return torch.where(mask.bool(), m, torch.zeros_like(m))


def position_mask(score: torch.Tensor, mask: torch.Tensor, cfg: PAECConfig) -> torch.Tensor:
    """The weights m of eq. 11: the soft mask (eq. 10) or, with ``cfg.soft_mask`` off, m ≡ 1 on response
    tokens and 0 at padding (table 2 "w/o Soft Mask": H̄ is then the plain mean nucleus entropy). Detached.
    """
    if not cfg.soft_mask:
        return mask.bool().to(score.dtype)
    return soft_mask(score, mask, cfg.quantile, cfg.sharpness)


def masked_entropy_sums(
    local_entropy: torch.Tensor, m: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Local numerator Σ m H' (with gradient) and denominator Σ m of eq. 11, as 0-dim tensors."""
    valid = mask.bool()
    w = torch.where(valid, m.detach(), torch.zeros_like(m)).to(local_entropy.dtype)
    h = torch.where(valid, local_entropy, torch.zeros_like(local_entropy))
    return (w * h).sum(), w.sum()


def masked_entropy(
    local_entropy: torch.Tensor, m: torch.Tensor, mask: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """H̄ = Σ m H' / (Σ m + ε) over the batch (eq. 11); gradient only through H' (appendix A.2)."""
    num, den = masked_entropy_sums(local_entropy, m, mask)
    return num / (den + eps)


def lower_bound_penalty(h_bar: torch.Tensor, h_low: float | None) -> torch.Tensor:
    """L_penalty = [max(0, H_low − H̄)]² (eq. 13); 0 while no anchor exists."""
    if h_low is None:
        return torch.zeros_like(h_bar)
    return (h_low - h_bar).clamp(min=0.0).square()


@dataclass(frozen=True)
class PAECLoss:
    """Output of :func:`paec_loss`: the extra loss term (add to L_GRPO) and its metrics."""

    loss: torch.Tensor  # −α H̄ + λ_ent L_penalty (eq. 15), scalar with gradient through H'
    h_bar: float
    penalty: float
    metrics: dict[str, float]


def paec_loss(
    local_entropy: torch.Tensor,
    m: torch.Tensor,
    mask: torch.Tensor,
    cfg: PAECConfig,
    *,
    h0: float | None,
    global_num: float | torch.Tensor | None = None,
    global_den: float | torch.Tensor | None = None,
    all_reduce: AllReduce | None = None,
    nucleus_size: torch.Tensor | None = None,
    value: float | None = None,
) -> PAECLoss:
    """PAEC's extra loss term −α H̄ + λ_ent [max(0, ρ_min H0 − H̄)]² (eq. 11, 13, 15).

    H̄ is global over the optimiser step: its *value* is ``global_num / (global_den + ε)`` when given
    (the trainer's no-grad pass over every micro-batch and rank), else this call's sums after
    ``all_reduce``. The gradient is this call's share Σ_local m ∇H' / (global_den + ε), so summing the
    gradients of all micro-batches and ranks gives exactly ∇H̄ (appendix A.2: m carries none).
    ``value`` overrides the value only (``paec.hbar_scope="step"``: H̄ and the penalty gate from the
    whole rollout batch of the step, the gradient still from this optimiser step's rows).
    """
    num, den = masked_entropy_sums(local_entropy, m, mask)
    if global_num is None or global_den is None:
        stats = torch.stack([num.detach(), den.detach()]).to(torch.float64)
        stats = all_reduce(stats) if all_reduce is not None else stats
        g_num, g_den = float(stats[0]), float(stats[1])
    else:
        g_num, g_den = float(global_num), float(global_den)
    value = g_num / (g_den + cfg.mask_eps) if value is None else float(value)
    share = num / (g_den + cfg.mask_eps)
    h_bar = share + (value - share).detach()
    h_low = None if h0 is None else cfg.rho_min * h0
    pen = lower_bound_penalty(h_bar, h_low)
    loss = -cfg.alpha * h_bar + cfg.lambda_ent * pen
    valid = mask.bool()
    n_valid = max(int(valid.sum()), 1)
    metrics = {
        "paec/h_bar": value,
        "paec/h0": float("nan") if h0 is None else float(h0),
        "paec/h_low": float("nan") if h_low is None else float(h_low),
        "paec/penalty": float(pen.detach()),
        "paec/penalty_active": float(h_low is not None and value < h_low),
        "paec/mask_mean": float((m.detach() * valid).sum()) / n_valid,
        "paec/loss": float(loss.detach()),
    }
    if nucleus_size is not None:
        metrics["paec/nucleus_size"] = float((nucleus_size.to(torch.float64) * valid).sum()) / n_valid
    return PAECLoss(loss=loss, h_bar=value, penalty=float(pen.detach()), metrics=metrics)
