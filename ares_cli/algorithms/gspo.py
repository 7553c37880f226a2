"""GSPO and GSPO-token: the length-normalised sequence importance ratio, clipped per sequence.

Zheng et al. 2025, "Group Sequence Policy Optimization" (arXiv 2507.18071). With y_i a response of |y_i|
tokens and r_{i,t} = pi_theta(y_{i,t}) / pi_old(y_{i,t}):

- s_i = (pi_theta(y_i) / pi_old(y_i))^(1/|y_i|) = exp((1/|y_i|) sum_t log r_{i,t})            (eq. 7)
- GSPO: J = E[1/G sum_i min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i)]             (eq. 5)
  with gradient s_i A_i (1/|y_i|) sum_t grad log pi(y_{i,t}) while s_i is inside the range   (eq. 10-11)
- GSPO-token: s_{i,t} = sg[s_i] pi_theta(y_{i,t}) / sg[pi_theta(y_{i,t})] (value s_i, gradient that of
  the token's own log-prob), J = E[1/G sum_i 1/|y_i| sum_t min(s_{i,t} A_{i,t}, clip(s_{i,t}) A_{i,t})]
                                                                                              (eq. 13-14)
  with A_{i,t} = A_i it has the same value and gradient as GSPO (eq. 17-18); it exists for token-level
  advantages (ARES's psi bonus).

The paper clips at eps_low = 3e-4 and eps_high = 4e-4 (sec. 5.1; the ``gspo`` presets set them) and has no
dual clip (set ``dual_clip`` to apply one to the sequence surrogate anyway). Both losses use the loss
signature of :mod:`.policy_loss_core`. ``gspo`` puts the sequence loss l_i on every valid token of its row, so
the aggregation decides how sequences are weighed: ``seq_mean_token_mean`` (the presets', verl's) gives
eq. 5's 1/G sum_i l_i; ``token_mean`` weighs each sequence by its length (TRL's ``loss_type="dapo"`` or
``"bnpo"`` with ``importance_sampling_level="sequence"``). The sequence log-ratio is clamped to
+-``log_ratio_clamp`` before exp (verl clamps it above at 10; TRL does not clamp).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ares_cli.algorithms.policy_loss_core import (
    POLICY_LOSSES,
    LossExtras,
    PolicyLossConfig,
    clamp_log_ratio,
    finish,
    frac,
    masked_inputs,
    select,
    token_advantages,
    token_ratio,
)
from ares_cli.errors import UsageError

__all__ = ["sequence_log_ratio", "sequence_advantages", "gspo_loss", "gspo_token_loss"]


def sequence_log_ratio(
    logprob: Tensor, old_logprob: Tensor, mask: Tensor, config: PolicyLossConfig
) -> Tensor:
    """log s_i = (1/|y_i|) sum_t (log pi_theta - log pi_old)(y_{i,t}) over valid tokens (eq. 7), [N], clamped
    per ``log_ratio_clamp``; a row without valid tokens gets 0 (s_i = 1). Differentiable in ``logprob``."""
    valid = mask.bool()
    total = select(logprob - old_logprob.detach(), valid).sum(-1)
    return clamp_log_ratio(total / valid.sum(-1).clamp(min=1).to(total.dtype), config)


def sequence_advantages(advantages: Tensor, mask: Tensor) -> Tensor:
    """One advantage per sequence [N]: ``advantages`` [N], or [N, T] constant over each row's valid tokens.

    Token-level advantages that vary within a row have no sequence reading: use ``gspo_token``."""
    a = advantages.detach()
    if a.dim() == 1:
        return a
    valid = mask.bool()
    hi = torch.where(valid, a, torch.full_like(a, -float("inf"))).amax(-1)
    lo = torch.where(valid, a, torch.full_like(a, float("inf"))).amin(-1)
    has = valid.any(-1)
    if bool(((hi - lo).abs() > 1e-6 * (1.0 + hi.abs())).logical_and(has).any()):
        raise UsageError("gspo takes one advantage per sequence; token-level advantages (e.g. aepo.token_bonus) "
                         "need gspo_token")  # fmt: skip
    return torch.where(has, hi, torch.zeros_like(hi))


def _sequence_clip(s: Tensor, a: Tensor, config: PolicyLossConfig) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sequence max(-A s, -A clip(s)) (+ the optional dual clip); with the low / high clip flags."""
    pg = torch.maximum(-a * s, -a * s.clamp(1.0 - config.clip_low, 1.0 + config.clip_high))
    if config.dual_clip is not None:
        pg = torch.where(a < 0, torch.minimum(pg, -a * config.dual_clip), pg)
    low = (s.detach() < 1.0 - config.clip_low) & (a < 0)
    high = (s.detach() > 1.0 + config.clip_high) & (a > 0)
    return pg, low, high


def _metrics(s: Tensor, low: Tensor, high: Tensor, mask: Tensor) -> dict[str, float]:
    """Clip fractions counted in tokens (the paper reports clipped tokens) and the sequence ratio."""
    valid = mask.bool()

    def tokens(flags: Tensor) -> Tensor:
        return flags if flags.dim() == 2 else flags[:, None].expand(valid.shape)

    seq_s = s.detach()[valid.any(-1)]
    return {
        "clipfrac_low": frac(tokens(low), valid),
        "clipfrac_high": frac(tokens(high), valid),
        "gspo_seq_ratio_mean": float(seq_s.mean()) if seq_s.numel() else 1.0,
        "gspo_seq_ratio_max": float(seq_s.max()) if seq_s.numel() else 1.0,
    }


@POLICY_LOSSES.register(
    "gspo",
    reads=("clip_low", "clip_high", "dual_clip"),
    summary="GSPO: the clipped sequence ratio (Zheng et al. 2025 eq. 5)",
)
def gspo_loss(
    logprob,
    old_logprob,
    advantages,
    mask,
    *,
    config: PolicyLossConfig,
    aggregation,
    extras: LossExtras | None = None,
):
    """GSPO (eq. 5): the clipped sequence surrogate of each row on each of its valid tokens."""
    logprob, old_logprob, advantages = masked_inputs(mask, logprob, old_logprob, advantages)
    log_s = sequence_log_ratio(logprob, old_logprob, mask, config)
    s = log_s.exp()
    a = sequence_advantages(advantages, mask).to(s.dtype)
    pg_seq, low, high = _sequence_clip(s, a, config)
    pg = pg_seq[:, None].expand(mask.shape)
    log_ratio, ratio = token_ratio(logprob, old_logprob, config)
    return finish(pg, mask, _metrics(s, low, high, mask), config, aggregation, extras, log_ratio, ratio)


@POLICY_LOSSES.register(
    "gspo_token",
    reads=("clip_low", "clip_high", "dual_clip"),
    summary="GSPO-token: the sequence ratio's value with each token's gradient (eq. 13-14)",
)
def gspo_token_loss(
    logprob,
    old_logprob,
    advantages,
    mask,
    *,
    config: PolicyLossConfig,
    aggregation,
    extras: LossExtras | None = None,
):
    """GSPO-token (eq. 13-14): per token max(-A_{i,t} s_{i,t}, -A_{i,t} clip(s_{i,t})), s_{i,t} = s_i in value."""
    logprob, old_logprob, advantages = masked_inputs(mask, logprob, old_logprob, advantages)
    log_s = sequence_log_ratio(logprob, old_logprob, mask, config).detach()
    s_tok = (log_s[:, None] + logprob - logprob.detach()).exp()
    a = token_advantages(advantages, s_tok)
    pg, low, high = _sequence_clip(s_tok, a, config)
    log_ratio, ratio = token_ratio(logprob, old_logprob, config)
    return finish(
        pg, mask, _metrics(log_s.exp(), low, high, mask), config, aggregation, extras, log_ratio, ratio
    )
