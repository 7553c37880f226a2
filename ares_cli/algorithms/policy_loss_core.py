"""What every policy loss shares: its constants (:class:`PolicyLossConfig`, the one place they are declared),
optional per-token inputs (:class:`LossExtras`), the registry ``POLICY_LOSSES`` and the modifiers applied after
the surrogate (:func:`finish`: top-entropy mask, token weights, entropy bonus, aggregation). The losses themselves
live in :mod:`.policy_losses` (PPO, CISPO, Clip-Cov, KL-Cov) and :mod:`.gspo` (GSPO, GSPO-token), the registry's
providers, imported on its first lookup.

Each loss is declared once, by ``@POLICY_LOSSES.register(name, reads=..., micro_batch_statistics=...,
summary=...)`` at its definition (:class:`PolicyLossEntry`): the loss-specific constants it reads (a set
constant no chosen loss reads is a usage error when the config resolves) and whether it takes statistics over
each call (then the default token budget plans micro-batches by rows, so the gradient does not depend on it).

Masking is by select (``torch.where``), never by multiplying with the mask: a NaN or inf at a padded position
(a log-prob a backend filled in, an overflowed ratio) must not reach a loss, a metric or a gradient. Every
loss replaces its padded inputs by 0 before any arithmetic (:func:`masked_inputs`), so the gradient at a padded
position is exactly 0 as well (a product such as 0 * exp(NaN) would be NaN there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from ares_cli.algorithms.loss_aggregation import Aggregation, masked_inputs, masked_mean, select
from ares_cli.algorithms.registry import Entry, Registry
from ares_cli.config import check, option
from ares_cli.errors import UsageError

__all__ = [
    "POLICY_LOSSES", "PolicyLossEntry", "TOP_ENTROPY_RULES", "ENTROPY_AGGREGATIONS", "ENTROPY_SCOPES",
    "PolicyLossConfig", "LossExtras", "select", "masked_inputs", "token_ratio", "token_advantages",
    "top_entropy_mask", "finish", "loss_constants", "takes_micro_batch_statistics"
]  # fmt: skip

TOP_ENTROPY_RULES = ("ceil", "quantile")
ENTROPY_AGGREGATIONS = ("loss", "token_mean")
ENTROPY_SCOPES = ("all", "kept")


@dataclass(frozen=True)
class PolicyLossConfig:
    """Every constant of every policy loss, with the papers' defaults (GRPO/PAEC clip 0.2/0.2; CISPO,
    Clip-Cov and KL-Cov as PAEC's baselines ran them in verl). The RL stage's ``loss`` section
    (:class:`~ares_cli.training.rl.config.LossConfig`) is this class with the names of the loss, advantage
    estimator and aggregation added, so each constant is declared here only. Fields marked ``every_loss``
    are read by every loss (the shared modifiers); the others by the losses whose entry lists them."""

    clip_low: float = option(0.2, "PPO ratio clip below 1 (eps_low: 0.2; GSPO 3e-4).", ge=0.0)
    clip_high: float = option(
        0.2, "PPO ratio clip above 1 (eps_high: 0.2; DAPO clip-higher 0.28; GSPO 4e-4).", ge=0.0
    )
    dual_clip: float | None = option(
        3.0, "Dual-clip c on negative advantages (Ye et al. 2020; null = off).", gt=1.0
    )
    cispo_eps_low: float | None = option(
        0.0,
        "CISPO: IS weight clipped below at 1 - eps_low (PAEC app. B: 0, run in verl: weights in [1, 6]); "
        "null = no lower bound (MiniMax-M1).",
        ge=0.0,
    )
    cispo_eps_high: float = option(5.0, "CISPO: IS weight clipped above at 1 + eps_high (PAEC: 5.0).", ge=0.0)
    clip_cov_ratio: float = option(
        2e-4, "Clip-Cov fraction of valid tokens whose loss is zeroed (PAEC baseline: 2e-4).", ge=0.0, le=1.0
    )
    clip_cov_lb: float = option(1.0, "Clip-Cov covariance band lower bound (1.0).")
    clip_cov_ub: float = option(5.0, "Clip-Cov covariance band upper bound (5.0).")
    kl_cov_ratio: float = option(
        2e-4, "KL-Cov fraction of top-covariance tokens (PAEC baseline: 2e-4).", ge=0.0, le=1.0
    )
    kl_cov_coef: float = option(
        0.1, "KL-Cov coefficient of the |log-ratio| term (PAEC baseline ppo_kl_coef: 0.1)."
    )
    entropy_coef: float = option(
        0.0, "Global entropy bonus: loss -= coef * H (entropy preset: 8e-4, PAEC baseline).", every_loss=True
    )
    entropy_aggregation: str = option(
        "loss",
        '"loss": the bonus is aggregated like the loss (verl); "token_mean": always the token mean (TRL).',
        choices=ENTROPY_AGGREGATIONS,
        every_loss=True,
    )
    entropy_scope: str = option(
        "all",
        '"all": the bonus acts on every valid token; "kept": only on the tokens top_entropy_frac keeps (TRL).',
        choices=ENTROPY_SCOPES,
        every_loss=True,
    )
    top_entropy_frac: float | None = option(
        None,
        "Keep the PG term only on this top fraction of tokens by entropy (80/20: 0.2; null = all).",
        gt=0.0,
        le=1.0,
        every_loss=True,
        micro_batch_statistics=True,
    )
    top_entropy_rule: str = option(
        "ceil",
        '"ceil": the ceil(frac n) highest (ties kept); "quantile": H >= the (1-frac)-quantile (TRL).',
        choices=TOP_ENTROPY_RULES,
        every_loss=True,
    )
    log_ratio_clamp: float | None = option(
        20.0, "Clamp of the policy log-ratio before exp (verl 20; null = none, TRL).", gt=0.0, every_loss=True
    )

    def __post_init__(self):
        check(self)  # ranges and choices, as a resolved config is checked: a UsageError naming the key


def loss_constants(*, every_loss: bool | None = None) -> tuple[str, ...]:
    """Names of :class:`PolicyLossConfig`'s constants (only the shared modifiers, or only the others)."""
    return tuple(
        f.name
        for f in fields(PolicyLossConfig)
        if every_loss is None or bool(f.metadata.get("every_loss")) == every_loss
    )


@dataclass(frozen=True)
class PolicyLossEntry(Entry):
    """A registered policy loss. ``reads``: the loss-specific constants of :class:`PolicyLossConfig` it uses
    (every loss reads the ``every_loss`` modifiers too); ``micro_batch_statistics``: it takes statistics over
    each call (covariance means, a random selection), so which rows share a micro-batch changes its gradient."""

    reads: tuple[str, ...] = ()
    micro_batch_statistics: bool = False

    def __post_init__(self):
        unknown = sorted(set(self.reads) - set(loss_constants(every_loss=False)))
        if unknown:
            raise ValueError(
                f"policy loss {self.name!r} reads {unknown}, which are not loss-specific constants of "
                f"PolicyLossConfig: {', '.join(loss_constants(every_loss=False))}"
            )


POLICY_LOSSES: Registry[PolicyLossEntry] = Registry(
    "policy loss",
    entry=PolicyLossEntry,
    providers=("ares_cli.algorithms.policy_losses", "ares_cli.algorithms.gspo"),
)


def takes_micro_batch_statistics(name: str, config: PolicyLossConfig) -> bool:
    """Whether loss ``name`` under ``config`` takes statistics over each call: its entry says so, or a
    constant declared ``micro_batch_statistics`` (the 80/20 ``top_entropy_frac``) is set."""
    if POLICY_LOSSES.entry(name).micro_batch_statistics:
        return True
    return any(
        f.metadata.get("micro_batch_statistics") and getattr(config, f.name) is not None
        for f in fields(PolicyLossConfig)
    )


@dataclass
class LossExtras:
    """Optional per-token inputs shared by all losses ([N, T] each)."""

    entropy: Tensor | None = None
    token_weights: Tensor | None = None
    generator: torch.Generator | None = None


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
    whatever the loss's aggregation (TRL's convention); ``"loss"`` uses the loss's own (verl's).
    ``entropy_scope="kept"`` puts the bonus only on the tokens the top-entropy rule keeps (TRL); its token
    mean is then the mean over the kept tokens of the call, weighted by the call's share of the step's tokens
    (with one micro-batch per optimiser step exactly TRL's)."""
    extras = extras or LossExtras()
    valid = mask.bool()
    entropy, weights = masked_inputs(mask, extras.entropy, extras.token_weights)
    keep = valid
    if config.top_entropy_frac is not None:
        if entropy is None:
            raise UsageError("top_entropy_frac needs extras.entropy")
        keep = top_entropy_mask(entropy, mask, config.top_entropy_frac, config.top_entropy_rule)
        pg = select(pg, keep)
        metrics["top_entropy_keep_frac"] = frac(keep, valid)
    if weights is not None:
        pg = pg * torch.broadcast_to(weights.detach().to(pg.dtype), pg.shape)
    metrics["pg_loss"] = (
        float(aggregation(pg.detach(), mask)) if aggregation else float(masked_mean(pg.detach(), mask))
    )
    if config.entropy_coef and entropy is None:
        raise UsageError("entropy_coef needs extras.entropy (computed with gradient)")
    if entropy is not None:
        metrics["entropy"] = float(masked_mean(entropy.detach(), mask))
    metrics.update(ratio_metrics(log_ratio, ratio, mask))
    scoped = config.entropy_scope == "kept" and keep is not valid
    bonus = select(entropy, keep) if scoped else entropy
    if aggregation is None:
        per_token = pg - config.entropy_coef * bonus if config.entropy_coef else pg
        return select(per_token, valid), metrics
    if config.entropy_coef and config.entropy_aggregation == "token_mean":
        mean = Aggregation("token_mean", aggregation.global_tokens, aggregation.global_sequences)
        share = float(valid.sum()) / float(keep.sum().clamp(min=1)) if scoped else 1.0
        loss = aggregation(pg, mask) - config.entropy_coef * share * mean(bonus, mask)
    elif config.entropy_coef:
        loss = aggregation(pg - config.entropy_coef * bonus, mask)
    else:
        loss = aggregation(pg, mask)
    metrics["loss"] = float(loss.detach())
    return loss, metrics
