"""Outcome advantages from per-response rewards, grouped by prompt (registry ``ADVANTAGES``).

Every estimator has one signature::

    fn(rewards [N], *, group_ids [N] | None = None, group_size: int | None = None, eps=1e-6, **options)
        -> (advantages [N] float32, metrics dict[str, float])

Give either ``group_ids`` (any integer labels, groups need not be contiguous) or ``group_size`` (responses
of one prompt are contiguous, N divisible by it). Estimators:

- ``grpo``: A_i = (r_i - mean_g) / (std_g + eps) (DeepSeekMath / GRPO). ``std="unbiased"`` (default,
  Bessel-corrected, divisor n - 1, as torch.std, TRL and verl use) or ``std="biased"`` (divisor n). A
  group of one response has no spread: its advantage is 0.
- ``drgrpo``: A_i = r_i - mean_g (Dr.GRPO: no std division).
- ``batch_norm``: c_i = r_i - mean_g, then A_i = c_i / (std_batch(c) + eps) (group-centred, normalised by
  the std of the centred values over the whole batch; REINFORCE++-baseline style), same ``std`` option.

A group whose rewards are all equal gets A = 0 under every estimator; ``zero_variance_group_frac`` logs how
many such groups the batch had.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ares_cli.algorithms.registry import Registry
from ares_cli.errors import UsageError

__all__ = [
    "ADVANTAGES", "STD_KINDS", "group_index", "group_moments", "grpo", "drgrpo", "batch_norm",
    "compute_advantages"
]  # fmt: skip

ADVANTAGES: Registry = Registry("advantage estimator")
STD_KINDS = ("unbiased", "biased")


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


def group_moments(r: Tensor, idx: Tensor, g: int, std: str) -> tuple[Tensor, Tensor, Tensor]:
    """Per-group count, mean and std ([G] each); std of a one-element group is 0 (either kind)."""
    if std not in STD_KINDS:
        raise UsageError(f"std must be one of {STD_KINDS}, got {std!r}")
    count = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, idx, torch.ones_like(r))
    mean = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, idx, r) / count
    sq = torch.zeros(g, dtype=r.dtype, device=r.device).index_add_(0, idx, (r - mean[idx]) ** 2)
    denom = (count - 1).clamp(min=1) if std == "unbiased" else count
    return count, mean, (sq / denom).sqrt()


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


@ADVANTAGES.register("grpo")
def grpo(
    rewards: Tensor,
    *,
    group_ids: Tensor | None = None,
    group_size: int | None = None,
    eps: float = 1e-6,
    std: str = "unbiased",
) -> tuple[Tensor, dict[str, float]]:
    """GRPO outcome advantage A_i = (r_i - mean_g) / (std_g + eps), std Bessel-corrected by default."""
    r, idx, g = _prepare(rewards, group_ids, group_size)
    count, mean, gstd = group_moments(r, idx, g, std)
    adv = (r - mean[idx]) / (gstd[idx] + eps)
    adv = torch.where(count[idx] < 2, torch.zeros_like(adv), adv)
    return adv.float(), _metrics(r, adv, count, gstd)


@ADVANTAGES.register("drgrpo")
def drgrpo(
    rewards: Tensor,
    *,
    group_ids: Tensor | None = None,
    group_size: int | None = None,
    eps: float = 1e-6,
    std: str = "unbiased",
) -> tuple[Tensor, dict[str, float]]:
    """Dr.GRPO advantage A_i = r_i - mean_g (``eps`` and ``std`` only affect the logged metrics)."""
    r, idx, g = _prepare(rewards, group_ids, group_size)
    count, mean, gstd = group_moments(r, idx, g, std)
    adv = r - mean[idx]
    return adv.float(), _metrics(r, adv, count, gstd)


@ADVANTAGES.register("batch_norm")
def batch_norm(
    rewards: Tensor,
    *,
    group_ids: Tensor | None = None,
    group_size: int | None = None,
    eps: float = 1e-6,
    std: str = "unbiased",
) -> tuple[Tensor, dict[str, float]]:
    """Group-centred rewards c_i = r_i - mean_g divided by the batch std of c plus eps."""
    r, idx, g = _prepare(rewards, group_ids, group_size)
    count, mean, gstd = group_moments(r, idx, g, std)
    c = r - mean[idx]
    n = c.numel()
    if n < 2:
        return torch.zeros_like(c).float(), _metrics(r, torch.zeros_like(c), count, gstd)
    bstd = c.std(unbiased=(std == "unbiased"))
    adv = c / (bstd + eps)
    out = _metrics(r, adv, count, gstd)
    out["batch_std"] = float(bstd)
    return adv.float(), out


def compute_advantages(name: str, rewards: Tensor, **kwargs) -> tuple[Tensor, dict[str, float]]:
    """Look up estimator ``name`` in :data:`ADVANTAGES` and apply it."""
    return ADVANTAGES.get(name)(rewards, **kwargs)
