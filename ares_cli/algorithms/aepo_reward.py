"""AEPO "how much to explore": the hierarchical entropy reward (ARES section 3.2.2, appendix I, alg. 1).

Pieces, each a pure function over tensors:

- λ_d, the closed-form multiplier (sec. 3.2.2): ``lagrange_multiplier``;
- g_d(Δ), the shaping direction (sec. 3.2.2): ``shaping_direction``;
- R(x, y; d) = R_acc − 1[acc = 0] λ_d g_d(Δ) (sec. 3.2.2), or the appendix-I reading: ``hierarchical_reward``;
- ψ_{i,t}, algorithm 1's token-level advantage bonus (line 19): ``token_bonus``;
- ``aepo_rewards``: one step of the above with a :class:`~.controllers.HETargetTracker` as target source.

Buckets are the integer codes of :mod:`.aepo` (EASY = 0, MEDIUM = 1, HARD = 2), one per response.
Rewards are computed after bucketing (the bucket needs the whole group's pass count).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ares_cli.algorithms.aepo import EASY, HARD, MEDIUM, AEPOConfig, _choice
from ares_cli.algorithms.controllers import BucketMoments, HETargetTracker


def lagrange_multiplier(
    mean: torch.Tensor,
    target: torch.Tensor,
    var: torch.Tensor,
    count: torch.Tensor | None = None,
    eps: float = 1.0,
    mode: str = "paper",
) -> torch.Tensor:
    """Closed-form λ_d per bucket (section 3.2.2), float64 [3].

    ``mode="paper"``: λ_d = max(0, (E[N_HE|d] − N_target(d)) / (Var[N_HE|d] + ε)).
    ``mode="directional"``: the numerator follows the side g_d penalises — easy max(0, E − target),
    medium |E − target|, hard max(0, target − E) — so the hard bucket's multiplier grows when its
    exploration falls *below* target. Buckets with ``count`` 0 get λ_d = 0.
    """
    _choice("lambda mode", mode, ("paper", "directional"))
    diff = mean.to(torch.float64) - target.to(torch.float64)
    if mode == "paper":
        num = diff.clamp(min=0.0)
    else:
        num = torch.stack([diff[EASY].clamp(min=0.0), diff[MEDIUM].abs(), (-diff[HARD]).clamp(min=0.0)])
    lam = num / (var.to(torch.float64) + eps)
    if count is not None:
        lam = torch.where(count.to(lam.device) > 0, lam, torch.zeros_like(lam))
    return lam


def shaping_direction(delta: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
    """g_d(Δ) (section 3.2.2): easy max(0, Δ), medium |Δ|, hard max(0, −Δ); Δ = N_HE − N_target(d)."""
    easy, hard = delta.clamp(min=0.0), (-delta).clamp(min=0.0)
    return torch.where(buckets == EASY, easy, torch.where(buckets == HARD, hard, delta.abs()))


def _effective_cap(r_acc: torch.Tensor, correct: torch.Tensor, cap: float) -> float:
    """Largest shaping magnitude that cannot reorder correct above incorrect: min(cap, gap / 2)."""
    if correct.any() and (~correct).any():
        gap = float(r_acc[correct].min() - r_acc[~correct].max())
        return max(0.0, min(cap, gap / 2.0))
    return cap


def hierarchical_reward(
    r_acc: torch.Tensor,
    correct: torch.Tensor,
    n_he: torch.Tensor,
    buckets: torch.Tensor,
    target: torch.Tensor,
    lam: torch.Tensor,
    variant: str = "paper",
    cap: float = 1.0,
) -> torch.Tensor:
    """Hierarchical entropy reward per response, float32 [N].

    ``variant="paper"`` (section 3.2.2): R = R_acc − 1[acc = 0]·min(λ_d g_d(Δ), cap). Correct responses
    keep R_acc, so a correct answer never scores below an incorrect one of its bucket (given R_acc does).

    ``variant="appendix_i"`` (appendix I, figure 9): shaping also reaches correct answers —
    easy: −λ max(0, Δ) for every response (correct answers kept short);
    medium: correct −λ|Δ|, incorrect −λ max(0, −Δ) (failed attempts pushed to explore more);
    hard: +λ max(0, Δ) for every response (exploration rewarded regardless of accuracy), incorrect also
    −λ max(0, −Δ). Each term is clipped to ±min(cap, gap/2), gap = min R_acc(correct) − max R_acc(incorrect)
    in the batch, which keeps every correct response at or above every incorrect one.
    """
    _choice("reward variant", variant, ("paper", "appendix_i"))
    correct = correct.bool()
    r = r_acc.to(torch.float64)
    delta = n_he.to(torch.float64) - target.to(torch.float64)[buckets]
    lam_i = lam.to(torch.float64)[buckets]
    if variant == "paper":
        pen = (lam_i * shaping_direction(delta, buckets)).clamp(max=cap)
        return (r - torch.where(correct, torch.zeros_like(pen), pen)).to(torch.float32)
    pos, neg = delta.clamp(min=0.0), (-delta).clamp(min=0.0)
    easy = -pos
    medium = torch.where(correct, -delta.abs(), -neg)
    hard = torch.where(correct, pos, pos - neg)
    shape = lam_i * torch.where(buckets == EASY, easy, torch.where(buckets == HARD, hard, medium))
    c = _effective_cap(r, correct, cap)
    return (r + shape.clamp(min=-c, max=c)).to(torch.float32)


def token_bonus(
    window_ent: torch.Tensor,
    hwe: torch.Tensor,
    mask: torch.Tensor,
    buckets: torch.Tensor,
    lam: torch.Tensor,
    threshold: torch.Tensor | float,
    phi: str = "identity",
    baseline: str = "mean",
) -> torch.Tensor:
    """Token-level advantage bonus ψ_{i,t} = λ_d φ([H̄_{i,t:w} − θ]_+) m_{i,t} − b_i (algorithm 1 line 19).

    φ is not specified by the paper: ``"identity"`` or ``"tanh"``. b_i: ``"mean"`` = the per-response mean
    of the bonus over its valid tokens (so ψ moves credit *within* a response and leaves its mean
    advantage unchanged), ``"none"`` = 0. Returns float32 [N, T], zero at padding; add it to Ã_{i,t}.
    """
    _choice("phi", phi, ("identity", "tanh"))
    _choice("baseline", baseline, ("mean", "none"))
    m = mask.to(torch.float32)
    excess = (window_ent.detach().to(torch.float32) - float(threshold)).clamp(min=0.0)
    if phi == "tanh":
        excess = torch.tanh(excess)
    raw = lam.to(torch.float32)[buckets][:, None] * excess * hwe.to(torch.float32) * m
    if baseline == "mean":
        b = raw.sum(1, keepdim=True) / m.sum(1, keepdim=True).clamp(min=1.0)
        raw = (raw - b) * m
    return raw


@dataclass(frozen=True)
class AEPORewards:
    """Output of :func:`aepo_rewards`: shaped rewards plus the per-bucket quantities behind them."""

    reward: torch.Tensor  # [N] float32
    target: torch.Tensor  # N_target(d), [3] float64
    lam: torch.Tensor  # λ_d, [3] float64
    moments: BucketMoments  # global count / mean / var of N_HE per bucket


def aepo_rewards(
    r_acc: torch.Tensor,
    correct: torch.Tensor,
    n_he: torch.Tensor,
    buckets: torch.Tensor,
    tracker: HETargetTracker,
    cfg: AEPOConfig,
    update: bool = True,
) -> AEPORewards:
    """One step of the hierarchical reward (section 3.2.2): moments → N_target → λ_d → R; then the tracker
    folds this batch into its history (``update=False`` leaves it untouched, e.g. for evaluation)."""
    m = tracker.moments(n_he, buckets)
    target = tracker.targets(m)
    lam = lagrange_multiplier(m.mean, target, m.var, m.count, eps=cfg.lambda_eps, mode=cfg.lambda_mode)
    reward = hierarchical_reward(
        r_acc,
        correct,
        n_he,
        buckets.to(n_he.device),
        target.to(n_he.device),
        lam.to(n_he.device),
        variant=cfg.reward_variant,
        cap=cfg.shaping_cap,
    )
    if update:
        tracker.update(m)
    return AEPORewards(reward=reward, target=target, lam=lam, moments=m)


def target_tracker_from_config(cfg: AEPOConfig, all_reduce=None) -> HETargetTracker:
    """The N_target(d) source (section 3.2.2) with the config's constants."""
    return HETargetTracker(cfg.target_source, cfg.target_ema_decay, cfg.target_fixed, all_reduce=all_reduce)
