"""Per-token KL(pi_theta || pi_ref) estimators from sampled-token log-probs (Schulman, "Approximating KL
divergence", 2020) and the KL loss term of ARES eq. 2 with token-adaptive weights beta_{i,t} (ARES eq. 1).

With log-ratio d = log pi_ref(o_t) - log pi_theta(o_t) of a token sampled from pi_theta:

- ``k1`` = -d                      (unbiased, high variance, can be negative)
- ``k2`` = d^2 / 2                 (biased, low variance, >= 0)
- ``k3`` = exp(d) - d - 1          (unbiased, low variance, >= 0; "low_var_kl")

Only k3 is clamped, as verl's ``kl_penalty`` clamps only its ``low_var_kl``: ``d`` to
[-log_ratio_clamp, log_ratio_clamp] (20) before ``exp`` (exp(d) overflows, and with it the gradient, long
before any real policy drifts that far) and the estimate to [-clamp, clamp] (10), so one far-off token cannot
dominate the loss. k1 and k2 have no exponential and are left unclamped: a clamped k2 would have zero
gradient once |d| > sqrt(2 clamp) (4.47 for 10), i.e. exactly on the tokens that drifted furthest from the
reference. ``None`` turns a clamp off (TRL clamps nothing).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ares_cli.algorithms.loss_aggregation import Aggregation, masked_inputs, masked_mean
from ares_cli.errors import UsageError

__all__ = ["KL_ESTIMATORS", "kl_estimate", "kl_loss"]

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(
    logprob: Tensor,
    ref_logprob: Tensor,
    *,
    kind: str = "k3",
    clamp: float | None = 10.0,
    log_ratio_clamp: float | None = 20.0,
) -> Tensor:
    """Per-token KL estimate [N, T] (module docstring); differentiable in ``logprob``. The clamps apply to k3
    only."""
    if kind not in KL_ESTIMATORS:
        raise UsageError(f"unknown KL estimator {kind!r}; valid: {', '.join(KL_ESTIMATORS)}")
    d = ref_logprob - logprob
    if kind == "k1":
        return -d
    if kind == "k2":
        return 0.5 * d.square()
    if log_ratio_clamp is not None:
        d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    kl = torch.expm1(d) - d
    return kl if clamp is None else kl.clamp(-clamp, clamp)


def kl_loss(
    logprob: Tensor,
    ref_logprob: Tensor,
    mask: Tensor,
    *,
    aggregation: Aggregation,
    kind: str = "k3",
    coef: float = 1.0,
    weights: Tensor | None = None,
    clamp: float | None = 10.0,
    log_ratio_clamp: float | None = 20.0,
) -> tuple[Tensor, dict[str, float]]:
    """KL loss term coef * Agg(w_{i,t} * KL_{i,t}) (ARES eq. 2 with beta_{i,t} = coef * w_{i,t}, eq. 1).

    ``weights`` [N, T] (or broadcastable) are per-token factors, e.g. AEPO's beta_d * rho_t; ``None`` means 1.
    Returns the scalar loss to add to the policy loss and metrics (unweighted mean KL over valid tokens and
    the weighted mean). Padded positions are set to 0 before any arithmetic, so a NaN there reaches neither
    the loss nor the gradient."""
    logprob, ref_logprob, weights = masked_inputs(mask, logprob, ref_logprob, weights)
    kl = kl_estimate(logprob, ref_logprob, kind=kind, clamp=clamp, log_ratio_clamp=log_ratio_clamp)
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
