"""AEPO "how much to explore": the hierarchical entropy reward (ARES section 3.2.2, appendix I, alg. 1).

Pieces, each a pure function over tensors:

- λ_d, the closed-form multiplier (sec. 3.2.2): ``lagrange_multiplier``;
- g_d(Δ), the shaping direction (sec. 3.2.2): ``shaping_direction``;
- R(x, y; d) = R_acc − 1[acc = 0] λ_d g_d(Δ) (sec. 3.2.2), the appendix-I reading, or algorithm 1 line 14's
  R_acc + S_d − λ_d C_ent / Z: ``shaped_reward`` (per-group caps, :func:`group_caps`);
- ψ_{i,t}, algorithm 1's token-level advantage bonus (line 19): ``token_bonus``;
- ``aepo_rewards``: one step of the above with a :class:`~.controllers.HETargetTracker` as target source.

Buckets are the integer codes of :mod:`.aepo` (EASY = 0, MEDIUM = 1, HARD = 2), one per response.
Rewards are computed after bucketing (the bucket needs the whole group's pass count).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ares_cli.algorithms.aepo import REWARD_VARIANTS, AEPOConfig, _choice
from ares_cli.algorithms.buckets import EASY, HARD, MEDIUM
from ares_cli.algorithms.controllers import BucketMoments, HETargetTracker
from ares_cli.errors import UsageError

__all__ = [
    "lagrange_multiplier", "shaping_direction", "group_caps", "hierarchical_reward", "shaped_reward",
    "token_bonus", "AEPORewards", "aepo_rewards", "target_tracker_from_config"
]  # fmt: skip


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


def group_caps(r_acc: torch.Tensor, correct: torch.Tensor, groups: torch.Tensor, cap: float) -> torch.Tensor:
    """Per response, the largest shaping magnitude that cannot reorder its group: min(cap, gap_g / 2).

    gap_g = min R_acc(correct) − max R_acc(incorrect) within the response's group g (GRPO compares
    responses only within a group); a group with only correct or only incorrect answers gets ``cap``.
    A group whose correct answers score at or below an incorrect one (overlong shaping, format terms)
    gets 0 and turns shaping off for itself only. float64 [N].
    """
    correct = correct.bool()
    g = groups.to(r_acc.device).long()
    n = int(g.max()) + 1 if g.numel() else 0
    r = r_acc.to(torch.float64)
    inf = torch.full((n,), float("inf"), dtype=torch.float64, device=r.device)
    lo = inf.scatter_reduce(0, g[correct], r[correct], reduce="amin")
    hi = (-inf).scatter_reduce(0, g[~correct], r[~correct], reduce="amax")
    gap = lo - hi  # +inf when a side is missing
    return ((gap / 2.0).clamp(min=0.0).clamp(max=cap))[g]


def hierarchical_reward(
    r_acc: torch.Tensor,
    correct: torch.Tensor,
    n_he: torch.Tensor,
    buckets: torch.Tensor,
    target: torch.Tensor,
    lam: torch.Tensor,
    variant: str = "paper",
    cap: float = 1.0,
    *,
    groups: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
    easy_explore: float = 0.1,
    alg1_norm: str = "length",
) -> torch.Tensor:
    """Hierarchical entropy reward per response, float32 [N] (:func:`shaped_reward` also returns metrics)."""
    return shaped_reward(r_acc, correct, n_he, buckets, target, lam, variant, cap, groups=groups,
                         lengths=lengths, easy_explore=easy_explore, alg1_norm=alg1_norm)[0]  # fmt: skip


def shaped_reward(
    r_acc: torch.Tensor,
    correct: torch.Tensor,
    n_he: torch.Tensor,
    buckets: torch.Tensor,
    target: torch.Tensor,
    lam: torch.Tensor,
    variant: str = "paper",
    cap: float = 1.0,
    *,
    groups: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
    easy_explore: float = 0.1,
    alg1_norm: str = "length",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Hierarchical entropy reward per response (float32 [N]) and how often a cap bound.

    ``variant="paper"`` (section 3.2.2): R = R_acc − 1[acc = 0]·min(λ_d g_d(Δ), cap). Correct responses
    keep R_acc, so a correct answer never scores below an incorrect one (given R_acc does).

    ``variant="appendix_i"`` (appendix I, figure 9): shaping also reaches correct answers —
    easy: correct −λ max(0, Δ), incorrect −λ max(0, Δ) − μ λ max(0, −Δ) ("only mild encouragement when
    errors occur ... a small degree of exploratory thinking if the model initially fails": a failed easy
    attempt below its target loses a μ = ``easy_explore`` fraction of the slope per missing window, so its
    reward rises with N_HE up to the target, as medium's incorrect term does at full slope; μ = 0 treats
    failed and correct easy answers alike);
    medium: correct −λ|Δ|, incorrect −λ max(0, −Δ) (failed attempts pushed to explore more);
    hard: +λ max(0, Δ) for every response (exploration rewarded regardless of accuracy), incorrect also
    −λ max(0, −Δ). Each term is clipped to ±min(cap, gap_g/2) with gap_g taken within the response's
    group (:func:`group_caps`; the whole batch is one group when ``groups`` is None), which keeps every
    correct response at or above every incorrect one of its group.

    ``variant="alg1"`` (algorithm 1 line 14): R = R_acc + S_d(N_HE, acc) − λ_d C_ent / Z with S_d the
    paper's shaping term (−1[acc = 0] min(λ_d g_d(Δ), cap)), C_ent = N_HE the entropy-window cost and
    Z = the response length (``alg1_norm="length"``: C/Z is the fraction of the response inside high-
    entropy windows, ≤ 1) or max(1, N_target(d)) (``"target"``). The cost term reaches correct answers
    too, so it is capped per group like appendix I.

    Metrics: ``aepo/cap_bound_frac`` (responses whose shaping a group cap below ``cap`` clipped) and
    ``aepo/cap_zero_group_frac`` (groups whose cap is 0: shaping off for them).
    """
    _choice("reward variant", variant, REWARD_VARIANTS)
    _choice("alg1 normaliser", alg1_norm, ("length", "target"))
    correct = correct.bool()
    r = r_acc.to(torch.float64)
    groups = torch.zeros_like(buckets) if groups is None else groups.to(buckets.device)
    delta = n_he.to(torch.float64) - target.to(torch.float64)[buckets]
    lam_i = lam.to(torch.float64)[buckets]
    paper_pen = (lam_i * shaping_direction(delta, buckets)).clamp(max=cap)
    if variant == "paper":
        return (r - torch.where(correct, torch.zeros_like(paper_pen), paper_pen)).to(torch.float32), {}
    if variant == "appendix_i":
        pos, neg = delta.clamp(min=0.0), (-delta).clamp(min=0.0)
        easy = torch.where(correct, -pos, -pos - easy_explore * neg)
        medium = torch.where(correct, -delta.abs(), -neg)
        hard = torch.where(correct, pos, pos - neg)
        shape = lam_i * torch.where(buckets == EASY, easy, torch.where(buckets == HARD, hard, medium))
    else:
        if alg1_norm == "length":
            if lengths is None:
                raise UsageError("reward_variant='alg1' with alg1_norm='length' needs the response lengths")
            z = lengths.to(torch.float64).clamp(min=1.0)
        else:
            z = target.to(torch.float64)[buckets].clamp(min=1.0)
        s_d = -torch.where(correct, torch.zeros_like(paper_pen), paper_pen)
        shape = s_d - lam_i * n_he.to(torch.float64) / z
    c = group_caps(r, correct, groups, cap)
    out = torch.maximum(torch.minimum(shape, c), -c)
    bound = (c < cap) & (out != shape)
    n_groups = int(groups.max()) + 1 if groups.numel() else 0
    zero = torch.zeros(n_groups, dtype=torch.bool, device=groups.device).index_fill_(0, groups[c <= 0], True)
    metrics = {"aepo/cap_bound_frac": float(bound.double().mean()) if len(bound) else 0.0,
               "aepo/cap_zero_group_frac": float(zero.double().mean()) if n_groups else 0.0}  # fmt: skip
    return (r + out).to(torch.float32), metrics


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
    metrics: dict[str, float]  # cap diagnostics of :func:`shaped_reward` (local to this rank)


def aepo_rewards(
    r_acc: torch.Tensor,
    correct: torch.Tensor,
    n_he: torch.Tensor,
    buckets: torch.Tensor,
    tracker: HETargetTracker,
    cfg: AEPOConfig,
    update: bool = True,
    *,
    groups: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
) -> AEPORewards:
    """One step of the hierarchical reward (section 3.2.2): moments → N_target → λ_d → R; then the tracker
    folds this batch into its history (``update=False`` leaves it untouched, e.g. for evaluation)."""
    m = tracker.moments(n_he, buckets)
    target = tracker.targets(m)
    lam = lagrange_multiplier(m.mean, target, m.var, m.count, eps=cfg.lambda_eps, mode=cfg.lambda_mode)
    reward, metrics = shaped_reward(r_acc, correct, n_he, buckets.to(n_he.device), target.to(n_he.device),
                                    lam.to(n_he.device), cfg.reward_variant, cfg.shaping_cap, groups=groups,
                                    lengths=lengths, easy_explore=cfg.easy_explore,
                                    alg1_norm=cfg.alg1_norm)  # fmt: skip
    if update:
        tracker.update(m)
    return AEPORewards(reward=reward, target=target, lam=lam, moments=m, metrics=metrics)


def target_tracker_from_config(cfg: AEPOConfig, all_reduce=None) -> HETargetTracker:
    """The N_target(d) source (section 3.2.2) with the config's constants."""
    return HETargetTracker(cfg.target_source, cfg.target_ema_decay, cfg.target_fixed, all_reduce=all_reduce)
