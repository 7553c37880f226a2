"""AER: Adaptive Entropy Regularization (Zhang et al., arXiv 2510.10959), PAEC's strongest baseline.

Reconstructed from what is public (``shared/notes/aer.md``: the paper's method section was not available).
Every open question is a named option; the defaults are the most plausible readings, marked as ours in
docs/methods.md. Three parts:

- difficulty-aware allocation: w_i = 1[acc(q_i) ≤ ρ] (``allocation="gate"``) or w_i = 1 − acc(q_i)
  (``"linear"``), acc(q) the pass rate of q's group this step, ρ = 0.2 (PAEC app. B);
- initial-anchored target: H* = τ·H0, τ = 0.4, H0 the per-token mean entropy of the first ``anchor_steps``
  rollout batches before any update, all ranks;
- a global coefficient driven towards the target once per step from H_t (the step's pre-update per-token
  mean entropy, all ranks), used from the next step on: α ← clip(α + η(H* − H_t), α_min, α_max)
  (``update_rule="proportional"``) or α ± η·sign(H* − H_t) (``"sign"``), η = 0.005.

Loss (minimised): L_GRPO − (1/N) Σ_i Σ_t α w_i H_{i,t}, H the full-vocabulary token entropy with gradient,
N the optimiser step's response tokens (``normaliser="all"``) or only those of gated responses
(``"gated"``). α and w are constants. :class:`~.controllers.AERController` holds α and H0.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from ares_cli.config import option
from ares_cli.errors import UsageError

__all__ = [
    "ALLOCATIONS", "UPDATE_RULES", "SIGNALS", "NORMALISERS", "CADENCES", "AERConfig", "sample_weights",
    "coef_update", "entropy_sums", "aer_loss"
]  # fmt: skip

ALLOCATIONS = ("gate", "linear")
UPDATE_RULES = ("proportional", "sign")
SIGNALS = ("all", "gated")
NORMALISERS = ("all", "gated")
CADENCES = ("step", "minibatch")


@dataclass(frozen=True)
class AERConfig:
    """Every AER constant: PAEC app. B's τ, ρ, η; the rest our reconstruction (docs/methods.md)."""

    target_ratio: float = option(0.4, "τ: target entropy H* = τ·H0 (PAEC app. B: 0.4).", gt=0.0, le=1.0)
    acc_threshold: float = option(
        0.2, "ρ: a prompt is hard when its group pass rate is <= ρ (PAEC app. B: 0.2).", ge=0.0, le=1.0
    )
    coef_lr: float = option(
        0.005, "η: step size of the global coefficient update (PAEC app. B: 0.005).", ge=0.0
    )
    coef_init: float = option(0.0, "α_0: initial global coefficient (not published; ours).")
    coef_min: float = option(0.0, "α_min: lower clip of α (ours: never negative).")
    coef_max: float = option(0.05, "α_max: upper clip of α (not published; ours).", ge=0.0)
    allocation: str = option("gate", 'Per-sample weight: "gate" 1[acc <= ρ] or "linear" 1 - acc.')
    update_rule: str = option("proportional", '"proportional": α += η(H* - H); "sign": α += η·sign(H* - H).')
    anchor_steps: int = option(1, "K: first K steps' pre-update entropy averaged into H0.", ge=1)
    signal: str = option("all", 'Entropy the controller tracks: "all" responses or only "gated" ones.')
    normaliser: str = option("all", 'Loss normaliser N: "all" response tokens or only "gated" ones.')
    cadence: str = option("step", '"step": α updated once per RL step; "minibatch": once per optimiser step.')

    def __post_init__(self) -> None:
        for name, valid in (("allocation", ALLOCATIONS), ("update_rule", UPDATE_RULES), ("signal", SIGNALS),
                            ("normaliser", NORMALISERS), ("cadence", CADENCES)):  # fmt: skip
            if getattr(self, name) not in valid:
                raise UsageError(f"unknown aer.{name} {getattr(self, name)!r}; valid: {', '.join(valid)}")
        if not 0.0 < self.target_ratio <= 1.0:
            raise UsageError(f"aer.target_ratio must lie in (0, 1], got {self.target_ratio}")
        if not 0.0 <= self.acc_threshold <= 1.0:
            raise UsageError(f"aer.acc_threshold must lie in [0, 1], got {self.acc_threshold}")
        if self.coef_lr < 0 or self.anchor_steps < 1:
            raise UsageError("aer.coef_lr must be >= 0 and aer.anchor_steps >= 1")
        if not self.coef_min <= self.coef_init <= self.coef_max:
            raise UsageError("need aer.coef_min <= aer.coef_init <= aer.coef_max")

    @classmethod
    def field_help(cls) -> dict[str, str]:
        return {f.name: repr(f.default) for f in fields(cls)}


def sample_weights(pass_rate: torch.Tensor, cfg: AERConfig) -> torch.Tensor:
    """w_i from the group pass rate of each response's prompt: 1[acc ≤ ρ] or 1 − acc, float32 [N]."""
    acc = pass_rate.to(torch.float32)
    if cfg.allocation == "gate":
        return (acc <= cfg.acc_threshold + 1e-9).to(torch.float32)
    return (1.0 - acc).clamp(min=0.0)


def coef_update(alpha: float, entropy: float, target: float, cfg: AERConfig) -> float:
    """One controller step: α rises while H < H* and falls while H > H*, clipped to [α_min, α_max]."""
    gap = target - entropy
    step = (
        cfg.coef_lr * gap if cfg.update_rule == "proportional" else cfg.coef_lr * float((gap > 0) - (gap < 0))
    )
    return min(max(alpha + step, cfg.coef_min), cfg.coef_max)


def entropy_sums(entropy: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None = None):
    """Local (Σ H, Σ 1) over response tokens, restricted to rows with weight > 0 when ``weights`` is given."""
    valid = mask.bool()
    if weights is not None:
        valid = valid & (weights > 0)[:, None]
    h = torch.where(valid, entropy.detach().to(torch.float64), torch.zeros((), dtype=torch.float64))
    return h.sum(), valid.sum().to(torch.float64)


def aer_loss(
    entropy: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor, alpha: float, normaliser: float
) -> torch.Tensor:
    """−(1/N) Σ_i Σ_t α w_i H_{i,t} for this micro-batch, N the optimiser step's global token count.

    Summing the calls of every micro-batch and rank gives the whole term (the trainer sums gradients)."""
    valid = mask.bool()
    h = torch.where(valid, entropy, torch.zeros_like(entropy))
    w = weights.detach().to(h.dtype)[:, None]
    return -alpha * (w * h).sum() / max(normaliser, 1.0)
