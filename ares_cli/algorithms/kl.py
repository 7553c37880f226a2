"""Per-token KL(pi_theta || pi_ref) estimators from sampled-token log-probs (Schulman, "Approximating KL
divergence", 2020) and the KL loss term of ARES eq. 2 with token-adaptive weights beta_{i,t} (ARES eq. 1).

With log-ratio d = log pi_ref(o_t) - log pi_theta(o_t) of a token sampled from pi_theta:

- ``k1`` = -d                      (unbiased, high variance, can be negative)
- ``k2`` = d^2 / 2                 (biased, low variance, >= 0)
- ``k3`` = exp(d) - d - 1          (unbiased, low variance, >= 0; "low_var_kl")

``d`` is clamped to [-log_ratio_clamp, log_ratio_clamp] (default 20) before ``exp`` and the estimate to
[-clamp, clamp] (default [-10, 10]), as verl does, so one far-off token cannot blow up the loss.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ares_cli.algorithms.aggregation import Aggregation, masked_mean
from ares_cli.errors import UsageError

__all__ = ["KL_ESTIMATORS", "kl_estimate", "kl_loss"]

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(
    logprob: Tensor,
    ref_logprob: Tensor,
    *,
    kind: str = "k3",
    clamp: float = 10.0,
    log_ratio_clamp: float = 20.0,
) -> Tensor:
    """Per-token KL estimate [N, T] (module docstring); differentiable in ``logprob``."""
    if kind not in KL_ESTIMATORS:
        raise UsageError(f"unknown KL estimator {kind!r}; valid: {', '.join(KL_ESTIMATORS)}")
    d = (ref_logprob - logprob).clamp(-log_ratio_clamp, log_ratio_clamp)
    if kind == "k1":
        kl = -d
    elif kind == "k2":
        kl = 0.5 * d.square()
    else:
        kl = torch.expm1(d) - d
    return kl.clamp(-clamp, clamp)


def kl_loss(
    logprob: Tensor,
    ref_logprob: Tensor,
    mask: Tensor,
    *,
    aggregation: Aggregation,
    kind: str = "k3",
    coef: float = 1.0,
    weights: Tensor | None = None,
    clamp: float = 10.0,
) -> tuple[Tensor, dict[str, float]]:
    """KL loss term coef * Agg(w_{i,t} * KL_{i,t}) (ARES eq. 2 with beta_{i,t} = coef * w_{i,t}, eq. 1).

    ``weights`` [N, T] (or broadcastable) are per-token factors, e.g. AEPO's beta_d * rho_t; ``None`` means 1.
    Returns the scalar loss to add to the policy loss and metrics (unweighted mean KL over valid tokens and
    the weighted mean)."""
    kl = kl_estimate(logprob, ref_logprob, kind=kind, clamp=clamp)
    w = (
        torch.ones_like(kl)
        if weights is None
        else torch.broadcast_to(weights.detach().to(kl.dtype), kl.shape)
    )
    loss = coef * aggregation(kl * w, mask)
    with torch.no_grad():
        metrics = {
            f"kl_{kind}": float(masked_mean(kl, mask)),
            "kl_weighted": float(masked_mean(kl * w, mask)),
            "kl_weight_mean": float(masked_mean(w, mask)),
            "kl_loss": float(loss),
        }
    return loss, metrics
