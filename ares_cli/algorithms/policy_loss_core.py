"""What every policy loss shares: its constants (:class:`PolicyLossConfig`), optional per-token inputs
(:class:`LossExtras`), the registry ``POLICY_LOSSES`` and the modifiers applied after the surrogate
(:func:`finish`: top-entropy mask, token weights, entropy bonus, aggregation). The losses themselves live in
:mod:`.policy_losses` (PPO, CISPO, Clip-Cov, KL-Cov) and :mod:`.gspo` (GSPO, GSPO-token).

Masking is by select (``torch.where``), never by multiplying with the mask: a NaN or inf at a padded
position (a log-prob a backend filled in, an overflowed ratio) must not reach a loss or a metric.
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
    "POLICY_LOSSES", "TOP_ENTROPY_RULES", "ENTROPY_AGGREGATIONS", "PolicyLossConfig", "LossExtras", "select",
    "token_ratio", "token_advantages", "top_entropy_mask", "finish"
]  # fmt: skip

POLICY_LOSSES: Registry = Registry("policy loss")
TOP_ENTROPY_RULES = ("ceil", "quantile")
ENTROPY_AGGREGATIONS = ("loss", "token_mean")


@dataclass(frozen=True)
class PolicyLossConfig:
    """Every constant of every policy loss, with the papers' defaults (GRPO/PAEC clip 0.2/0.2; CISPO,
    Clip-Cov and KL-Cov as PAEC's baselines ran them). The single source of these defaults: the trainer's
    ``LossConfig`` takes each shared field's default from here."""

    clip_low: float = option(0.2, "PPO ratio clip below 1 (eps_low; GSPO: 3e-4).")
    clip_high: float = option(
        0.2, "PPO ratio clip above 1 (eps_high: 0.2; DAPO clip-higher 0.28; GSPO 4e-4)."
    )
    dual_clip: float | None = option(3.0, "Dual-clip c on negative advantages (Ye et al. 2020; None = off).")
    cispo_eps_low: float | None = option(None, "CISPO lower clip; None = one-sided as in MiniMax-M1.")
    cispo_eps_high: float = option(5.0, "CISPO upper clip (PAEC baseline: 5.0).")
    clip_cov_ratio: float = option(2e-4, "Clip-Cov fraction of valid tokens whose loss is zeroed.")
    clip_cov_lb: float = option(1.0, "Clip-Cov covariance band lower bound.")
    clip_cov_ub: float = option(5.0, "Clip-Cov covariance band upper bound.")
    kl_cov_ratio: float = option(2e-4, "KL-Cov fraction of top-covariance tokens (PAEC baseline: 2e-4).")
    kl_cov_coef: float = option(0.1, "KL-Cov coefficient of the |log-ratio| term (PAEC baseline: 0.1).")
    entropy_coef: float = option(0.0, "Global entropy bonus: per-token loss -= entropy_coef * H_t.")
    entropy_aggregation: str = option(
        "loss", '"loss": the bonus is aggregated like the loss (verl); "token_mean": always (TRL).'
    )
    top_entropy_frac: float | None = option(
        None, "Keep the PG term only on this top fraction of tokens by entropy (80/20: 0.2; None = all)."
    )
    top_entropy_rule: str = option(
        "ceil", '"ceil": the ceil(frac n) highest (ties kept); "quantile": H >= the (1-frac)-quantile (TRL).'
    )
    log_ratio_clamp: float | None = option(
        20.0, "Clamp of the log-ratio before exp (verl 20; None = none, TRL)."
    )

    def __post_init__(self):
        if self.clip_low < 0 or self.clip_high < 0 or self.cispo_eps_high < 0:
            raise UsageError(
                f"clip_low, clip_high and cispo_eps_high must be >= 0, got {self.clip_low}, {self.clip_high}, "
                f"{self.cispo_eps_high}"
            )
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise UsageError(f"dual_clip must be > 1, got {self.dual_clip}")
        if self.top_entropy_frac is not None and not 0 < self.top_entropy_frac <= 1:
            raise UsageError(f"top_entropy_frac must be in (0, 1], got {self.top_entropy_frac}")
        if self.top_entropy_rule not in TOP_ENTROPY_RULES:
            raise UsageError(f"unknown top_entropy_rule {self.top_entropy_rule!r}; valid: ceil, quantile")
        if self.entropy_aggregation not in ENTROPY_AGGREGATIONS:
            raise UsageError(
                f"unknown entropy_aggregation {self.entropy_aggregation!r}; valid: loss, token_mean"
            )
        if self.log_ratio_clamp is not None and not self.log_ratio_clamp > 0:
            raise UsageError(f"log_ratio_clamp must be > 0 (or None), got {self.log_ratio_clamp}")


@dataclass
class LossExtras:
    """Optional per-token inputs shared by all losses ([N, T] each)."""

    entropy: Tensor | None = None
    token_weights: Tensor | None = None
    generator: torch.Generator | None = None


def select(values: Tensor, keep: Tensor) -> Tensor:
    """``values`` where ``keep``, 0 elsewhere (a select: NaN/inf outside ``keep`` never propagates)."""
    return torch.where(keep.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))


def clamp_log_ratio(log_ratio: Tensor, config: PolicyLossConfig) -> Tensor:
    c = config.log_ratio_clamp
    return log_ratio if c is None else log_ratio.clamp(-c, c)


def token_ratio(logprob: Tensor, old_logprob: Tensor, config: PolicyLossConfig) -> tuple[Tensor, Tensor]:
    """Per-token log-ratio (clamped per ``log_ratio_clamp``) and ratio r = exp(logprob - old_logprob)."""
    log_ratio = clamp_log_ratio(logprob - old_logprob.detach(), config)
    return log_ratio, log_ratio.exp()


def token_advantages(advantages: Tensor, like: Tensor) -> Tensor:
    """Detached advantages broadcast to ``like`` ([N] outcome advantages or [N, T] token-level ones)."""
    a = advantages.detach().to(like.dtype)
    if a.dim() == 1:
        a = a.unsqueeze(-1)
    return torch.broadcast_to(a, like.shape)


def frac(flags: Tensor, valid: Tensor) -> float:
    n = int(valid.sum())
    return float((flags & valid).sum()) / n if n else 0.0


def top_entropy_mask(entropy: Tensor, mask: Tensor, frac: float, rule: str = "ceil") -> Tensor:
    """Bool [N, T]: the valid tokens kept by the 80/20 rule (Wang et al. 2025).

    ``rule="ceil"``: entropy >= the k-th largest valid entropy, k = ceil(frac n) (``kthvalue``); ties at the
    threshold are all kept. ``rule="quantile"`` (TRL's ``top_entropy_quantile``): entropy >= the linearly
    interpolated (1 - frac)-quantile of the valid entropies, which keeps 1 + floor(frac (n - 1)) distinct
    values; the two agree except when frac n has a fractional part below frac (e.g. frac 0.3, n 4: 2 vs 1).
    Both sort instead of calling ``torch.quantile`` (which fails above 2^24 elements)."""
    valid = mask.bool()
    vals = entropy.detach()[valid].float()
    if vals.numel() == 0:
        return valid
    n = vals.numel()
    if rule == "ceil":
        thr = torch.kthvalue(vals, n - max(1, math.ceil(frac * n)) + 1).values
    elif rule == "quantile":
        srt = vals.sort().values
        pos = (1.0 - frac) * (n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        thr = torch.lerp(srt[lo], srt[hi], torch.tensor(pos - lo, dtype=srt.dtype))
    else:
        raise UsageError(f"unknown top_entropy_rule {rule!r}; valid: ceil, quantile")
    return valid & (entropy.detach().float() >= thr)


def ratio_metrics(log_ratio: Tensor, ratio: Tensor, mask: Tensor) -> dict[str, float]:
    with torch.no_grad():
        lr, r = log_ratio.detach(), ratio.detach()
        valid = mask.bool()
        return {
            "approx_kl_k1": float(masked_mean(-lr, mask)),
            "approx_kl_k3": float(masked_mean(torch.expm1(lr) - lr, mask)),
            "ratio_mean": float(masked_mean(r, mask)),
            "ratio_max": float(r[valid].max()) if valid.any() else 1.0,
        }


def finish(pg, mask, metrics, config, aggregation, extras, log_ratio, ratio):
    """Apply the shared modifiers (top-entropy mask, token weights, entropy bonus) and aggregate.

    With ``aggregation`` None the per-token loss [N, T] is returned (0 at padding); the entropy bonus is then
    per token as well. ``entropy_aggregation="token_mean"`` reduces the bonus by the global token mean
    whatever the loss's aggregation (TRL's convention); ``"loss"`` uses the loss's own (verl's)."""
    extras = extras or LossExtras()
    valid = mask.bool()
    if config.top_entropy_frac is not None:
        if extras.entropy is None:
            raise UsageError("top_entropy_frac needs extras.entropy")
        keep = top_entropy_mask(extras.entropy, mask, config.top_entropy_frac, config.top_entropy_rule)
        pg = select(pg, keep)
        metrics["top_entropy_keep_frac"] = frac(keep, valid)
    if extras.token_weights is not None:
        pg = pg * torch.broadcast_to(extras.token_weights.detach().to(pg.dtype), pg.shape)
    metrics["pg_loss"] = (
        float(aggregation(pg.detach(), mask)) if aggregation else float(masked_mean(pg.detach(), mask))
    )
    if config.entropy_coef and extras.entropy is None:
        raise UsageError("entropy_coef needs extras.entropy (computed with gradient)")
    if extras.entropy is not None:
        metrics["entropy"] = float(masked_mean(extras.entropy.detach(), mask))
    metrics.update(ratio_metrics(log_ratio, ratio, mask))
    if aggregation is None:
        per_token = pg - config.entropy_coef * extras.entropy if config.entropy_coef else pg
        return select(per_token, valid), metrics
    if config.entropy_coef and config.entropy_aggregation == "token_mean":
        mean = Aggregation("token_mean", aggregation.global_tokens, aggregation.global_sequences)
        loss = aggregation(pg, mask) - config.entropy_coef * mean(extras.entropy, mask)
    elif config.entropy_coef:
        loss = aggregation(pg - config.entropy_coef * extras.entropy, mask)
    else:
        loss = aggregation(pg, mask)
    metrics["loss"] = float(loss.detach())
    return loss, metrics
