"""Token-level policy-gradient losses (registry ``POLICY_LOSSES``), all with ONE signature::

    loss_fn(logprob, old_logprob, advantages, mask, *, config, aggregation, extras=None)
        -> (loss, metrics)

``logprob`` / ``old_logprob`` / ``mask`` are [N, T]; ``advantages`` is [N] (outcome advantage, broadcast
over tokens) or [N, T] (token-level, e.g. ARES's tilde-A_{i,t} = A_i + psi_{i,t}); ``config`` is a
:class:`PolicyLossConfig`; ``aggregation`` an :class:`~ares_cli.algorithms.aggregation.Aggregation`
(scalar loss returned) or ``None`` (the per-token loss [N, T] returned, padding zeroed). ``extras``
(:class:`LossExtras`) carries optional per-token entropy, per-token weights and the seeded generator.

Losses (r = exp(logprob - old_logprob), log-ratio clamped to +-20 before exp):

- ``ppo``: max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)) (PPO; clip-higher of DAPO: eps_low = 0.2,
  eps_high = 0.28), and for A < 0 the dual clip min(., -c A) with c = 3 (Ye et al. 2020); ARES eq. 2.
- ``cispo``: -sg(clip(r, 1 - eps_low, 1 + eps_high)) A logprob (MiniMax-M1). The clip is ONE-SIDED by
  default (``cispo_eps_low=None``: only the upper bound, as MiniMax-M1 describes); set ``cispo_eps_low``
  for the two-sided variant.
- ``clip_cov``: the PPO loss, except for a random ``clip_cov_ratio`` fraction of the valid tokens (drawn
  with ``extras.generator``) among those not already clipped whose covariance
  cov = (A - mean A)(logp - mean logp) lies in (lb, ub): their loss is zeroed, so they get no gradient
  (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs", sec. 4; means over the valid tokens
  of this call, detached; the number of tokens is max(1, floor(ratio * n_valid))).
- ``kl_cov``: -A r on every token plus kl_cov_coef * |logprob - old_logprob| on the top
  max(1, floor(kl_cov_ratio * n_valid)) tokens by covariance (same paper; no ratio clip).

Modifiers that apply to every loss (``config``):

- ``top_entropy_frac`` (e.g. 0.2: Wang et al. 2025 "80/20"): only the valid tokens whose entropy is among
  the top fraction of this call keep the policy-gradient term; the others' term is zeroed (denominators
  unchanged). Needs ``extras.entropy``.
- ``token_weights`` (``extras``): multiply the policy-gradient term per token (AEPO, PAEC masks).
- ``entropy_coef``: global entropy bonus, per-token loss -= entropy_coef * H_t (needs ``extras.entropy``
  computed with gradient, e.g. ``token_stats(..., entropy_grad=True)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ares_cli.algorithms.aggregation import Aggregation, masked_mean
from ares_cli.algorithms.registry import Registry
from ares_cli.config import option
from ares_cli.errors import UsageError

__all__ = [
    "POLICY_LOSSES", "PolicyLossConfig", "LossExtras", "covariance", "top_entropy_mask", "ppo_loss",
    "cispo_loss", "clip_cov_loss", "kl_cov_loss", "policy_loss"
]  # fmt: skip

POLICY_LOSSES: Registry = Registry("policy loss")


@dataclass(frozen=True)
class PolicyLossConfig:
    """Every constant of every policy loss, with the papers' defaults (GRPO/PAEC clip 0.2/0.2; CISPO,
    Clip-Cov and KL-Cov as PAEC's baselines ran them). The single source of these defaults: the trainer's
    ``LossConfig`` takes each shared field's default from here."""

    clip_low: float = option(0.2, "PPO ratio clip below 1 (eps_low).")
    clip_high: float = option(0.2, "PPO ratio clip above 1 (eps_high: 0.2; DAPO clip-higher 0.28).")
    dual_clip: float | None = option(3.0, "Dual-clip c on negative advantages (Ye et al. 2020; None = off).")
    cispo_eps_low: float | None = option(None, "CISPO lower clip; None = one-sided as in MiniMax-M1.")
    cispo_eps_high: float = option(5.0, "CISPO upper clip (PAEC baseline: 5.0).")
    clip_cov_ratio: float = option(2e-4, "Clip-Cov fraction of valid tokens whose loss is zeroed.")
    clip_cov_lb: float = option(1.0, "Clip-Cov covariance band lower bound.")
    clip_cov_ub: float = option(5.0, "Clip-Cov covariance band upper bound.")
    kl_cov_ratio: float = option(2e-4, "KL-Cov fraction of top-covariance tokens (PAEC baseline: 2e-4).")
    kl_cov_coef: float = option(0.1, "KL-Cov coefficient of the |log-ratio| term (PAEC baseline: 0.1).")
    entropy_coef: float = option(0.0, "Global entropy bonus: per-token loss -= entropy_coef * H_t.")
    top_entropy_frac: float | None = option(
        None, "Keep the PG term only on this top fraction of tokens by entropy (80/20: 0.2; None = all)."
    )
    log_ratio_clamp: float = option(20.0, "Clamp of the log-ratio before exp.")

    def __post_init__(self):
        if self.clip_low < 0 or self.clip_high < 0 or self.cispo_eps_high < 0:
            raise UsageError("clip bounds must be >= 0")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise UsageError(f"dual_clip must be > 1, got {self.dual_clip}")
        if self.top_entropy_frac is not None and not 0 < self.top_entropy_frac <= 1:
            raise UsageError(f"top_entropy_frac must be in (0, 1], got {self.top_entropy_frac}")


@dataclass
class LossExtras:
    """Optional per-token inputs shared by all losses ([N, T] each)."""

    entropy: Tensor | None = None
    token_weights: Tensor | None = None
    generator: torch.Generator | None = None


def _ratio(logprob: Tensor, old_logprob: Tensor, config: PolicyLossConfig) -> tuple[Tensor, Tensor]:
    log_ratio = (logprob - old_logprob.detach()).clamp(-config.log_ratio_clamp, config.log_ratio_clamp)
    return log_ratio, log_ratio.exp()


def _adv(advantages: Tensor, like: Tensor) -> Tensor:
    a = advantages.detach().to(like.dtype)
    if a.dim() == 1:
        a = a.unsqueeze(-1)
    return torch.broadcast_to(a, like.shape)


def covariance(advantages: Tensor, logprob: Tensor, mask: Tensor) -> Tensor:
    """Per-token cov = (A - mean A)(logp - mean logp), means over valid tokens; detached, -inf on padding."""
    a, lp = advantages.detach(), logprob.detach()
    cov = (a - masked_mean(a, mask)) * (lp - masked_mean(lp, mask))
    return cov.masked_fill(~mask.bool(), float("-inf"))


def top_entropy_mask(entropy: Tensor, mask: Tensor, frac: float) -> Tensor:
    """Bool [N, T]: valid tokens whose entropy is >= the k-th largest valid entropy, k = ceil(frac * n).

    Uses ``kthvalue`` (no 2^24 limit like ``torch.quantile``); ties at the threshold are all kept."""
    valid = mask.bool()
    vals = entropy.detach()[valid]
    if vals.numel() == 0:
        return valid
    k = max(1, math.ceil(frac * vals.numel()))
    thr = torch.kthvalue(vals.float(), vals.numel() - k + 1).values
    return valid & (entropy.detach().float() >= thr)


def _ppo_terms(logprob, old_logprob, advantages, mask, config):
    log_ratio, ratio = _ratio(logprob, old_logprob, config)
    a = _adv(advantages, ratio)
    pg1 = -a * ratio
    pg2 = -a * ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high)
    pg = torch.maximum(pg1, pg2)
    valid = mask.bool()
    metrics = {
        "clipfrac_low": _frac((ratio < 1.0 - config.clip_low) & (a < 0), valid),
        "clipfrac_high": _frac((ratio > 1.0 + config.clip_high) & (a > 0), valid),
    }
    if config.dual_clip is not None:
        pg3 = -a * config.dual_clip
        dual = (a < 0) & (pg > pg3)
        pg = torch.where(a < 0, torch.minimum(pg, pg3), pg)
        metrics["dual_clipfrac"] = _frac(dual, valid)
    return pg, log_ratio, ratio, a, metrics


def _frac(flags: Tensor, valid: Tensor) -> float:
    n = int(valid.sum())
    return float((flags & valid).sum()) / n if n else 0.0


def _ratio_metrics(log_ratio: Tensor, ratio: Tensor, mask: Tensor) -> dict[str, float]:
    with torch.no_grad():
        lr, r = log_ratio.detach(), ratio.detach()
        valid = mask.bool()
        return {
            "approx_kl_k1": float(masked_mean(-lr, mask)),
            "approx_kl_k3": float(masked_mean(torch.expm1(lr) - lr, mask)),
            "ratio_mean": float(masked_mean(r, mask)),
            "ratio_max": float(r[valid].max()) if valid.any() else 1.0,
        }


def _finish(pg, mask, metrics, config, aggregation, extras, log_ratio, ratio):
    """Apply the shared modifiers (top-entropy mask, token weights, entropy bonus) and aggregate."""
    extras = extras or LossExtras()
    valid = mask.bool()
    if config.top_entropy_frac is not None:
        if extras.entropy is None:
            raise UsageError("top_entropy_frac needs extras.entropy")
        keep = top_entropy_mask(extras.entropy, mask, config.top_entropy_frac)
        pg = pg * keep
        metrics["top_entropy_keep_frac"] = _frac(keep, valid)
    if extras.token_weights is not None:
        pg = pg * torch.broadcast_to(extras.token_weights.detach().to(pg.dtype), pg.shape)
    metrics["pg_loss"] = (
        float(aggregation(pg.detach(), mask)) if aggregation else float(masked_mean(pg.detach(), mask))
    )
    per_token = pg
    if config.entropy_coef:
        if extras.entropy is None:
            raise UsageError("entropy_coef needs extras.entropy (computed with gradient)")
        per_token = per_token - config.entropy_coef * extras.entropy
    if extras.entropy is not None:
        metrics["entropy"] = float(masked_mean(extras.entropy.detach(), mask))
    metrics.update(_ratio_metrics(log_ratio, ratio, mask))
    if aggregation is None:
        return per_token * valid, metrics
    loss = aggregation(per_token, mask)
    metrics["loss"] = float(loss.detach())
    return loss, metrics


@POLICY_LOSSES.register("ppo")
def ppo_loss(
    logprob,
    old_logprob,
    advantages,
    mask,
    *,
    config: PolicyLossConfig,
    aggregation: Aggregation | None,
    extras: LossExtras | None = None,
):
    """PPO clip with separate low/high bounds and the dual clip on negative advantages (ARES eq. 2)."""
    pg, log_ratio, ratio, _a, metrics = _ppo_terms(logprob, old_logprob, advantages, mask, config)
    return _finish(pg, mask, metrics, config, aggregation, extras, log_ratio, ratio)


@POLICY_LOSSES.register("cispo")
def cispo_loss(
    logprob,
    old_logprob,
    advantages,
    mask,
    *,
    config: PolicyLossConfig,
    aggregation: Aggregation | None,
    extras: LossExtras | None = None,
):
    """CISPO: -sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi; one-sided (upper) unless cispo_eps_low is set."""
    log_ratio, ratio = _ratio(logprob, old_logprob, config)
    a = _adv(advantages, ratio)
    lo = None if config.cispo_eps_low is None else 1.0 - config.cispo_eps_low
    w = ratio.detach().clamp(min=lo, max=1.0 + config.cispo_eps_high)
    pg = -w * a * logprob
    valid = mask.bool()
    metrics = {"cispo_clipfrac_high": _frac(ratio.detach() > 1.0 + config.cispo_eps_high, valid)}
    metrics["cispo_clipfrac_low"] = _frac(ratio.detach() < lo, valid) if lo is not None else 0.0
    return _finish(pg, mask, metrics, config, aggregation, extras, log_ratio, ratio)


def _n_select(ratio: float, n_valid: int) -> int:
    return max(1, int(ratio * n_valid)) if n_valid and ratio > 0 else 0


@POLICY_LOSSES.register("clip_cov")
def clip_cov_loss(
    logprob,
    old_logprob,
    advantages,
    mask,
    *,
    config: PolicyLossConfig,
    aggregation: Aggregation | None,
    extras: LossExtras | None = None,
):
    """Clip-Cov: PPO loss with a random fraction of in-band-covariance tokens detached (zero gradient)."""
    if extras is None or extras.generator is None:
        raise UsageError("clip_cov needs a seeded torch.Generator in extras.generator")
    pg, log_ratio, ratio, a, metrics = _ppo_terms(logprob, old_logprob, advantages, mask, config)
    valid = mask.bool()
    clipped = (ratio.detach() < 1.0 - config.clip_low) | (ratio.detach() > 1.0 + config.clip_high)
    cov = covariance(a, logprob, mask)
    band = valid & ~clipped & (cov > config.clip_cov_lb) & (cov < config.clip_cov_ub)
    cand = band.flatten().nonzero().squeeze(-1)
    n = min(_n_select(config.clip_cov_ratio, int(valid.sum())), cand.numel())
    perm = torch.randperm(cand.numel(), generator=extras.generator, device=extras.generator.device)
    drop = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
    drop[cand[perm[:n].to(cand.device)]] = True
    pg = pg * ~drop.view_as(valid)
    metrics["clip_cov_frac"] = _frac(drop.view_as(valid), valid)
    metrics["clip_cov_band_frac"] = _frac(band, valid)
    return _finish(pg, mask, metrics, config, aggregation, extras, log_ratio, ratio)


@POLICY_LOSSES.register("kl_cov")
def kl_cov_loss(
    logprob,
    old_logprob,
    advantages,
    mask,
    *,
    config: PolicyLossConfig,
    aggregation: Aggregation | None,
    extras: LossExtras | None = None,
):
    """KL-Cov: -A r everywhere plus coef * |logp - old logp| on the top-k covariance tokens."""
    log_ratio, ratio = _ratio(logprob, old_logprob, config)
    a = _adv(advantages, ratio)
    valid = mask.bool()
    cov = covariance(a, logprob, mask).flatten()
    k = _n_select(config.kl_cov_ratio, int(valid.sum()))
    sel = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
    if k:
        sel[torch.topk(cov, k).indices] = True
    sel = sel.view_as(valid) & valid
    pg = -a * ratio + config.kl_cov_coef * (logprob - old_logprob.detach()).abs() * sel
    metrics = {"kl_cov_frac": _frac(sel, valid)}
    return _finish(pg, mask, metrics, config, aggregation, extras, log_ratio, ratio)


def policy_loss(name: str, *args, **kwargs):
    """Look up loss ``name`` in :data:`POLICY_LOSSES` and apply it."""
    return POLICY_LOSSES.get(name)(*args, **kwargs)
