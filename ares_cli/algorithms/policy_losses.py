"""Token-level policy-gradient losses (registry ``POLICY_LOSSES``), all with ONE signature::

    loss_fn(logprob, old_logprob, advantages, mask, *, config, aggregation, extras=None)
        -> (loss, metrics)

``logprob`` / ``old_logprob`` / ``mask`` are [N, T]; ``advantages`` is [N] (outcome advantage, broadcast
over tokens) or [N, T] (token-level, e.g. ARES's tilde-A_{i,t} = A_i + psi_{i,t}); ``config`` is a
:class:`PolicyLossConfig`; ``aggregation`` an :class:`~ares_cli.algorithms.loss_aggregation.Aggregation`
(scalar loss returned) or ``None`` (the per-token loss [N, T] returned, padding zeroed). ``extras``
(:class:`LossExtras`) carries optional per-token entropy, per-token weights and the seeded generator.

Losses (r = exp(logprob - old_logprob), log-ratio clamped to +-``log_ratio_clamp`` (20) before exp; GSPO
and GSPO-token, the sequence-level ratio, are in :mod:`.gspo`):

- ``ppo``: max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)) (PPO; clip-higher of DAPO: eps_low = 0.2,
  eps_high = 0.28), and for A < 0 the dual clip min(., -c A) with c = 3 (Ye et al. 2020); ARES eq. 2.
- ``cispo``: -sg(clip(r, 1 - eps_low, 1 + eps_high)) A logprob (MiniMax-M1 eq. 4-5). Default eps_low = 0,
  eps_high = 5: the weights lie in [1, 6], as PAEC's CISPO baseline ran in verl (PAEC app. B sets
  eps_low = 0, eps_high = 5; verl clips the weight at 1 - clip_ratio_low below). ``cispo_eps_low=None`` is
  MiniMax-M1's reading, no lower bound ("we did not impose a lower bound on the IS weight").
- ``clip_cov``: the PPO loss, except for a random ``clip_cov_ratio`` fraction of the valid tokens (drawn
  with ``extras.generator``) among the candidates, whose loss is zeroed so they get no gradient (Cui et al.
  2025, "The Entropy Mechanism of RL for Reasoning LMs", sec. 4; the paper defers the details to its code,
  which verl carries as ``compute_policy_loss_clip_cov``, and that code is the reference here). A token is a
  candidate when its clipped branch is *not* active (the clipped surrogate -A clip(r) is not the larger
  one: unclipped tokens, and tokens with A < 0, r > 1 + eps_high or A > 0, r < 1 - eps_low, whose unclipped
  term already wins) and its covariance cov = (A - mean A)(logp - mean logp) lies in (lb, ub) (means over
  the valid tokens of this call, detached); the number dropped is max(1, floor(ratio * n_valid)). The
  reference loss has no dual clip: the ``clip_cov`` preset sets ``dual_clip`` to None.
- ``kl_cov``: -A r on every token plus kl_cov_coef * |logprob - old_logprob| on the top
  max(1, floor(kl_cov_ratio * n_valid)) tokens by covariance (same paper; no ratio clip).

Modifiers that apply to every loss (``config``):

- ``top_entropy_frac`` (e.g. 0.2: Wang et al. 2025 "80/20"): only the valid tokens whose entropy is among
  the top fraction of this call keep the policy-gradient term; the others' term is zeroed (denominators
  unchanged; ``top_entropy_rule`` counts them as ceil(frac n) or by TRL's quantile threshold). Needs
  ``extras.entropy``.
- ``token_weights`` (``extras``): multiply the policy-gradient term per token (AEPO, PAEC masks).
- ``entropy_coef``: global entropy bonus, per-token loss -= entropy_coef * H_t (needs ``extras.entropy``
  computed with gradient, e.g. ``token_stats(..., entropy_grad=True)``), aggregated like the loss or, with
  ``entropy_aggregation="token_mean"``, always as the token mean (TRL).

The shared pieces (config, extras, registry, modifiers, masking by select) are in :mod:`.policy_loss_core`;
each loss here is declared once, by its ``POLICY_LOSSES.register`` line.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ares_cli.algorithms.loss_aggregation import Aggregation, masked_mean
from ares_cli.algorithms.policy_loss_core import (
    POLICY_LOSSES,
    LossExtras,
    PolicyLossConfig,
    finish,
    frac,
    masked_inputs,
    token_advantages,
    token_ratio,
    top_entropy_mask,
)
from ares_cli.errors import UsageError

__all__ = [
    "POLICY_LOSSES", "PolicyLossConfig", "LossExtras", "covariance", "top_entropy_mask", "ppo_loss",
    "cispo_loss", "clip_cov_loss", "kl_cov_loss", "policy_loss"
]  # fmt: skip


def covariance(advantages: Tensor, logprob: Tensor, mask: Tensor) -> Tensor:
    """Per-token cov = (A - mean A)(logp - mean logp), means over valid tokens; detached, -inf on padding."""
    a, lp = advantages.detach(), logprob.detach()
    cov = (a - masked_mean(a, mask)) * (lp - masked_mean(lp, mask))
    return cov.masked_fill(~mask.bool(), float("-inf"))


def clipped_surrogate(ratio: Tensor, a: Tensor, mask: Tensor, config: PolicyLossConfig):
    """max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)), then the dual clip min(., -c A) for A < 0 when
    ``config.dual_clip`` is set (ARES eq. 2; Ye et al. 2020). Returns (loss, clip_active, metrics):
    ``clip_active`` marks the tokens whose clipped branch is the larger one (they get no gradient)."""
    pg1 = -a * ratio
    pg2 = -a * ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high)
    pg = torch.maximum(pg1, pg2)
    valid = mask.bool()
    metrics = {
        "clipfrac_low": frac((ratio < 1.0 - config.clip_low) & (a < 0), valid),
        "clipfrac_high": frac((ratio > 1.0 + config.clip_high) & (a > 0), valid),
    }
    if config.dual_clip is not None:
        pg3 = -a * config.dual_clip
        dual = (a < 0) & (pg > pg3)
        pg = torch.where(a < 0, torch.minimum(pg, pg3), pg)
        metrics["dual_clipfrac"] = frac(dual, valid)
    return pg, (pg2 > pg1).detach(), metrics


def _ppo_terms(logprob, old_logprob, advantages, mask, config):
    log_ratio, ratio = token_ratio(logprob, old_logprob, config)
    a = token_advantages(advantages, ratio)
    pg, clip_active, metrics = clipped_surrogate(ratio, a, mask, config)
    return pg, log_ratio, ratio, a, clip_active, metrics


@POLICY_LOSSES.register(
    "ppo",
    reads=("clip_low", "clip_high", "dual_clip"),
    summary="PPO clip with clip-higher and the dual clip (ARES eq. 2)",
)
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
    logprob, old_logprob, advantages = masked_inputs(mask, logprob, old_logprob, advantages)
    pg, log_ratio, ratio, _a, _active, metrics = _ppo_terms(logprob, old_logprob, advantages, mask, config)
    return finish(pg, mask, metrics, config, aggregation, extras, log_ratio, ratio)


@POLICY_LOSSES.register(
    "cispo",
    reads=("cispo_eps_low", "cispo_eps_high"),
    summary="CISPO: the clipped IS weight, detached, times A log pi",
)
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
    """CISPO: -sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi; no lower bound when cispo_eps_low is None."""
    logprob, old_logprob, advantages = masked_inputs(mask, logprob, old_logprob, advantages)
    log_ratio, ratio = token_ratio(logprob, old_logprob, config)
    a = token_advantages(advantages, ratio)
    lo = None if config.cispo_eps_low is None else 1.0 - config.cispo_eps_low
    w = ratio.detach().clamp(min=lo, max=1.0 + config.cispo_eps_high)
    pg = -w * a * logprob
    valid = mask.bool()
    metrics = {"cispo_clipfrac_high": frac(ratio.detach() > 1.0 + config.cispo_eps_high, valid)}
    metrics["cispo_clipfrac_low"] = frac(ratio.detach() < lo, valid) if lo is not None else 0.0
    return finish(pg, mask, metrics, config, aggregation, extras, log_ratio, ratio)


def _n_select(ratio: float, n_valid: int) -> int:
    return max(1, int(ratio * n_valid)) if n_valid and ratio > 0 else 0


@POLICY_LOSSES.register(
    "clip_cov",
    reads=("clip_low", "clip_high", "dual_clip", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"),
    micro_batch_statistics=True,
    summary="Clip-Cov: PPO with a random share of in-band-covariance tokens detached (Cui et al. 2025)",
)
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
    """Clip-Cov: PPO loss with a random fraction of the in-band-covariance tokens whose clipped branch is
    inactive detached (zero gradient); verl's ``compute_policy_loss_clip_cov`` rule (module docstring)."""
    if extras is None or extras.generator is None:
        raise UsageError("clip_cov needs a seeded torch.Generator in extras.generator")
    logprob, old_logprob, advantages = masked_inputs(mask, logprob, old_logprob, advantages)
    pg, log_ratio, ratio, a, clip_active, metrics = _ppo_terms(logprob, old_logprob, advantages, mask, config)
    valid = mask.bool()
    cov = covariance(a, logprob, mask)
    band = valid & ~clip_active & (cov > config.clip_cov_lb) & (cov < config.clip_cov_ub)
    cand = band.flatten().nonzero().squeeze(-1)
    n = min(_n_select(config.clip_cov_ratio, int(valid.sum())), cand.numel())
    perm = torch.randperm(cand.numel(), generator=extras.generator, device=extras.generator.device)
    drop = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
    drop[cand[perm[:n].to(cand.device)]] = True
    pg = torch.where(drop.view_as(valid), torch.zeros_like(pg), pg)
    metrics["clip_cov_frac"] = frac(drop.view_as(valid), valid)
    metrics["clip_cov_band_frac"] = frac(band, valid)
    return finish(pg, mask, metrics, config, aggregation, extras, log_ratio, ratio)


@POLICY_LOSSES.register(
    "kl_cov",
    reads=("kl_cov_ratio", "kl_cov_coef"),
    micro_batch_statistics=True,
    summary="KL-Cov: -A r plus a |log-ratio| term on the top-covariance tokens (Cui et al. 2025)",
)
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
    logprob, old_logprob, advantages = masked_inputs(mask, logprob, old_logprob, advantages)
    log_ratio, ratio = token_ratio(logprob, old_logprob, config)
    a = token_advantages(advantages, ratio)
    valid = mask.bool()
    cov = covariance(a, logprob, mask).flatten()
    k = _n_select(config.kl_cov_ratio, int(valid.sum()))
    sel = torch.zeros(valid.numel(), dtype=torch.bool, device=valid.device)
    if k:
        sel[torch.topk(cov, k).indices] = True
    sel = sel.view_as(valid) & valid
    kl_term = config.kl_cov_coef * (logprob - old_logprob.detach()).abs()
    pg = -a * ratio + torch.where(sel, kl_term, torch.zeros_like(kl_term))
    metrics = {"kl_cov_frac": frac(sel, valid)}
    return finish(pg, mask, metrics, config, aggregation, extras, log_ratio, ratio)


def policy_loss(name: str, *args, **kwargs):
    """Look up loss ``name`` in :data:`POLICY_LOSSES` and apply it."""
    return POLICY_LOSSES.get(name)(*args, **kwargs)
