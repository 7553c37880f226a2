"""Outcome advantages from per-response rewards, grouped by prompt (registry ``ADVANTAGES``).

Every estimator has one signature::

    fn(rewards [N], *, group_ids [N] | None = None, group_size: int | None = None, eps=1e-6,
       std="unbiased", lengths [N] | None = None, reduce=None, singleton="zero")
        -> (advantages [N] float32, metrics)

Give either ``group_ids`` (any integer labels, groups need not be contiguous) or ``group_size`` (responses
of one prompt are contiguous, N divisible by it). ``lengths`` are the responses' trained token counts (the
token-level estimator needs them); ``reduce`` sums a float64 tensor over ranks (identity when None), so the
batch-level estimators take their statistics over the whole step, not one rank's share. Groups are whole on
a rank, so the group-level ones need no reduction. Estimators:

- ``grpo``: A_i = (r_i - mean_g) / (std_g + eps) (DeepSeekMath / GRPO). ``std="unbiased"`` (default,
  Bessel-corrected, divisor n - 1, as torch.std, TRL and verl use) or ``std="biased"`` (divisor n). A
  group of one response has no spread: its advantage is 0.
- ``drgrpo``: A_i = r_i - mean_g (Dr.GRPO: no std division).
- ``group_mean_batch_std``: A_i = (r_i - mean_g) / (std_batch(r) + eps), the std of the *raw* rewards over
  the batch (Lite PPO, Liu et al. 2025 "Tricks or Traps? A Deep Dive into RL for LLM Reasoning"; TRL's
  ``scale_rewards="batch"``, which uses eps = 1e-4 and Bessel's correction).
- ``group_mean_centred_std``: c_i = r_i - mean_g, A_i = c_i / (std_batch(c) + eps), the std of the
  group-centred rewards over the batch (ours; it was called ``batch_norm`` and matches neither peer).
- ``reinforce_pp_baseline``: verl's REINFORCE++-baseline (Hu et al. 2025, arXiv 2501.03262): c_i = r_i -
  mean_g broadcast to the response's tokens, then whitened over every valid token of the batch,
  A_i = (c_i - mu) / sqrt(var + eps) with mu = sum L_i c_i / sum L_i and var = sum L_i (c_i - mu)^2 /
  (sum L_i - 1) (verl's ``masked_whiten``: token-weighted, mean shifted, Bessel over tokens; verl's eps
  is 1e-8, inside the root). Needs ``lengths``.

A group whose rewards are all equal gets A = 0 under ``grpo``, ``drgrpo``, ``group_mean_batch_std`` and
``group_mean_centred_std`` (``reinforce_pp_baseline`` shifts by the token mean, so such a group gets -mu /
sigma, as verl's does); ``zero_variance_group_frac`` logs how many such groups the batch had.

A group of one response (only a library call meets one: ``ares rl`` samples G >= 2) has no baseline of its
own. ``singleton="zero"`` (default) centres it on its own reward: c = 0, A = 0. ``singleton="verl"`` gives it
verl's mean 0 and std 1: c = r, so ``grpo`` gives r / (1 + eps), ``drgrpo`` r, and ``reinforce_pp_baseline``
whitens r with the batch (verl's ``compute_grpo_outcome_advantage`` and REINFORCE++-baseline). TRL refuses
G < 2 (``GRPOConfig`` raises), so it has no reading of its own.

Each estimator is declared once, by its ``ADVANTAGES.register`` line (:class:`AdvantageEntry`): which of
``eps`` / ``std`` it reads (a config that sets one it ignores is a usage error) and whether it needs lengths.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ares_cli.algorithms.registry import Entry, Registry
from ares_cli.errors import UsageError

__all__ = [
    "ADVANTAGES", "AdvantageEntry", "STD_KINDS", "SINGLETON_RULES", "group_index", "group_moments", "grpo", "drgrpo", "group_mean_batch_std",
    "group_mean_centred_std", "reinforce_pp_baseline", "compute_advantages"
]  # fmt: skip

STD_KINDS = ("unbiased", "biased")
SINGLETON_RULES = ("zero", "verl")


@dataclass(frozen=True)
class AdvantageEntry(Entry):
    """A registered estimator: ``reads`` which of its keywords ``eps`` / ``std`` it uses (the others only
    shape logged metrics, or nothing); ``needs_lengths``: it takes the responses' token counts."""

    reads: tuple[str, ...] = ()
    needs_lengths: bool = False

    def __post_init__(self):
        if not set(self.reads) <= {"eps", "std"}:
            raise ValueError(
                f"advantage estimator {self.name!r}: reads must name eps and/or std, got {self.reads}"
            )


ADVANTAGES: Registry[AdvantageEntry] = Registry("advantage estimator", entry=AdvantageEntry)
Reduce = Callable[[Tensor], Tensor]  # sum over ranks


def group_index(n: int, group_ids: Tensor | None, group_size: int | None, device=None) -> tuple[Tensor, int]:
    """Dense group index [N] in 0..G-1 and G, from labels or a contiguous group size."""
    if (group_ids is None) == (group_size is None):
        raise UsageError("give exactly one of group_ids or group_size")
    if group_size is not None:
        if group_size < 1 or n % group_size:
            raise UsageError(f"{n} rewards cannot be split into groups of {group_size}")
        return torch.arange(n, device=device) // group_size, n // group_size
    if group_ids.shape != (n,):
        raise UsageError(f"group_ids shape {tuple(group_ids.shape)} != rewards shape ({n},)")
    uniq, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, int(uniq.numel())


def group_moments(
    r: Tensor, idx: Tensor, g: int, std: str, singleton: str = "zero"
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-group count, mean and std ([G] each); a one-element group has std 0 (either kind) and mean r, or,
    with ``singleton="verl"``, mean 0 and std 1."""
    if std not in STD_KINDS:
        raise UsageError(f"std must be one of {STD_KINDS}, got {std!r}")
    if singleton not in SINGLETON_RULES:
        raise UsageError(f"singleton must be one of {SINGLETON_RULES}, got {singleton!r}")
    count = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, idx, torch.ones_like(r))
    mean = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, idx, r) / count
    sq = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, idx, (r - mean[idx]) ** 2)
    denom = (count - 1).clamp(min=1) if std == "unbiased" else count
    gstd = (sq / denom).sqrt()
    if singleton == "verl":
        one = count == 1
        mean, gstd = (
            torch.where(one, torch.zeros_like(mean), mean),
            torch.where(one, torch.ones_like(gstd), gstd),
        )
    return count, mean, gstd


def _prepare(rewards: Tensor, group_ids, group_size) -> tuple[Tensor, Tensor, int]:
    if rewards.dim() != 1:
        raise UsageError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    r = rewards.detach().to(torch.float64)
    idx, g = group_index(r.numel(), group_ids, group_size, r.device)
    return r, idx, g


def _metrics(r: Tensor, adv: Tensor, count: Tensor, gstd: Tensor) -> dict[str, float]:
    zero = (gstd == 0) | (count < 2)
    return {
        "zero_variance_group_frac": float(zero.double().mean()) if count.numel() else 0.0,
        "num_groups": float(count.numel()),
        "reward_mean": float(r.mean()) if r.numel() else 0.0,
        "reward_std": float(r.std(unbiased=False)) if r.numel() else 0.0,
        "adv_mean": float(adv.mean()) if adv.numel() else 0.0,
        "adv_abs_mean": float(adv.abs().mean()) if adv.numel() else 0.0,
        "adv_max": float(adv.max()) if adv.numel() else 0.0,
        "adv_min": float(adv.min()) if adv.numel() else 0.0,
    }


@ADVANTAGES.register("grpo", reads=("eps", "std"), summary="(r - group mean) / (group std + eps) (GRPO)")
def grpo(
    rewards: Tensor,
    *,
    group_ids: Tensor | None = None,
    group_size: int | None = None,
    eps: float = 1e-6,
    std: str = "unbiased",
    lengths: Tensor | None = None,
    reduce: Reduce | None = None,
    singleton: str = "zero",
) -> tuple[Tensor, dict[str, float]]:
    """GRPO outcome advantage A_i = (r_i - mean_g) / (std_g + eps), std Bessel-corrected by default."""
    r, idx, g = _prepare(rewards, group_ids, group_size)
    count, mean, gstd = group_moments(r, idx, g, std, singleton)
    adv = (r - mean[idx]) / (gstd[idx] + eps)
    if singleton == "zero":
        adv = torch.where(count[idx] < 2, torch.zeros_like(adv), adv)
    return adv.float(), _metrics(r, adv, count, gstd)


@ADVANTAGES.register("drgrpo", summary="r - group mean (Dr.GRPO)")
def drgrpo(
    rewards: Tensor,
    *,
    group_ids: Tensor | None = None,
    group_size: int | None = None,
    eps: float = 1e-6,
    std: str = "unbiased",
    lengths: Tensor | None = None,
    reduce: Reduce | None = None,
    singleton: str = "zero",
) -> tuple[Tensor, dict[str, float]]:
    """Dr.GRPO advantage A_i = r_i - mean_g (``eps`` and ``std`` only affect the logged metrics)."""
    r, idx, g = _prepare(rewards, group_ids, group_size)
    count, mean, gstd = group_moments(r, idx, g, std, singleton)
    adv = r - mean[idx]
    return adv.float(), _metrics(r, adv, count, gstd)


def _summed(values: Tensor, reduce: Reduce | None) -> Tensor:
    """``values`` (float64) summed over ranks."""
    return values if reduce is None else reduce(values.clone())


def _batch_std(x: Tensor, weights: Tensor, std: str, reduce: Reduce | None) -> tuple[Tensor, Tensor]:
    """Weighted mean and std of ``x`` over the whole batch, all ranks (two passes: the mean, then the
    centred squares, so no E[x^2] - E[x]^2 cancellation); ``std="unbiased"`` divides by sum(w) - 1."""
    n, total = _summed(torch.stack([weights.sum(), (weights * x).sum()]), reduce).tolist()
    mean = total / n if n else 0.0
    sq = float(_summed((weights * (x - mean) ** 2).sum().reshape(1), reduce)[0])
    denom = n - 1 if std == "unbiased" else n
    return torch.tensor(mean, dtype=x.dtype), torch.tensor(
        math.sqrt(sq / denom) if denom > 0 else 0.0, dtype=x.dtype
    )


@ADVANTAGES.register(
    "group_mean_batch_std",
    reads=("eps", "std"),
    summary="(r - group mean) / (batch std of the raw rewards + eps) (Lite PPO; TRL scale_rewards=batch)",
)
def group_mean_batch_std(
    rewards: Tensor,
    *,
    group_ids: Tensor | None = None,
    group_size: int | None = None,
    eps: float = 1e-6,
    std: str = "unbiased",
    lengths: Tensor | None = None,
    reduce: Reduce | None = None,
    singleton: str = "zero",
) -> tuple[Tensor, dict[str, float]]:
    """Lite PPO / TRL ``scale_rewards="batch"``: (r_i - mean_g) / (std of the raw rewards over the batch + eps)."""
    r, idx, g = _prepare(rewards, group_ids, group_size)
    count, mean, gstd = group_moments(r, idx, g, std, singleton)
    _, bstd = _batch_std(r, torch.ones_like(r), std, reduce)
    adv = (r - mean[idx]) / (bstd + eps)
    return adv.float(), _metrics(r, adv, count, gstd) | {"batch_std": float(bstd)}


@ADVANTAGES.register(
    "group_mean_centred_std",
    reads=("eps", "std"),
    summary="(r - group mean) / (batch std of the centred rewards + eps) (ours)",
)
def group_mean_centred_std(
    rewards: Tensor,
    *,
    group_ids: Tensor | None = None,
    group_size: int | None = None,
    eps: float = 1e-6,
    std: str = "unbiased",
    lengths: Tensor | None = None,
    reduce: Reduce | None = None,
    singleton: str = "zero",
) -> tuple[Tensor, dict[str, float]]:
    """Ours: c_i = r_i - mean_g divided by the std of c over the batch, plus eps."""
    r, idx, g = _prepare(rewards, group_ids, group_size)
    count, mean, gstd = group_moments(r, idx, g, std, singleton)
    c = r - mean[idx]
    _, bstd = _batch_std(c, torch.ones_like(c), std, reduce)
    adv = c / (bstd + eps)
    return adv.float(), _metrics(r, adv, count, gstd) | {"batch_std": float(bstd)}


@ADVANTAGES.register(
    "reinforce_pp_baseline",
    reads=("eps",),
    needs_lengths=True,
    summary="r - group mean, whitened over the batch's tokens (verl's REINFORCE++-baseline)",
)
def reinforce_pp_baseline(
    rewards: Tensor,
    *,
    group_ids: Tensor | None = None,
    group_size: int | None = None,
    eps: float = 1e-6,
    std: str = "unbiased",
    lengths: Tensor | None = None,
    reduce: Reduce | None = None,
    singleton: str = "zero",
) -> tuple[Tensor, dict[str, float]]:
    """verl's REINFORCE++-baseline: group-centred rewards whitened over the batch's tokens (module docstring).
    ``std`` is ignored: verl's whitening is Bessel-corrected over tokens."""
    if lengths is None:
        raise UsageError("reinforce_pp_baseline whitens per token: it needs the response lengths")
    r, idx, g = _prepare(rewards, group_ids, group_size)
    if lengths.shape != r.shape:
        raise UsageError(f"lengths shape {tuple(lengths.shape)} != rewards shape {tuple(r.shape)}")
    count, mean, gstd = group_moments(r, idx, g, std, singleton)
    c = r - mean[idx]
    mu, sigma = _batch_std(c, lengths.to(r.dtype), "unbiased", reduce)
    adv = (c - mu) / torch.sqrt(sigma**2 + eps)
    return adv.float(), _metrics(r, adv, count, gstd) | {"batch_std": float(sigma), "token_mean": float(mu)}


def compute_advantages(name: str, rewards: Tensor, **kwargs) -> tuple[Tensor, dict[str, float]]:
    """Look up estimator ``name`` in :data:`ADVANTAGES` and apply it."""
    return ADVANTAGES.get(name)(rewards, **kwargs)
