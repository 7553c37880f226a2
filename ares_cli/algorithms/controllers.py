"""Stateful controllers of AEPO and PAEC, with ``state_dict()`` / ``load_state_dict()`` for checkpoints.

Each controller keeps its state in plain Python floats (portable across devices and torch versions) and
takes an injectable ``all_reduce`` callable (sum of a tensor across ranks; identity by default). Methods
that take *local partial sums* reduce them with it, so with the identity the caller passes statistics that
are already global; with ``torch.distributed`` the trainer passes e.g.
``lambda t: (dist.all_reduce(t), t)[1]``. No controller holds module-level state.

- :class:`KLController`: per-bucket κ_d, ARES eq. 27 / algorithm 1 lines 33-34.
- :class:`ThresholdEMA`: the ``ema`` option of the AEPO threshold τ (section 3.2.1).
- :class:`HETargetTracker`: the N_target(d) source of the hierarchical reward (section 3.2.2).
- :class:`EntropyAnchor`: PAEC's anchor H0 (eq. 12, algorithm 1 lines 21-26).
- :class:`AERController`: AER's global coefficient α and anchor H0 (reconstruction, ``aer.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ares_cli.errors import UsageError

__all__ = [
    "AllReduce", "NUM_BUCKETS", "identity_all_reduce", "KLController", "ThresholdEMA", "BucketMoments",
    "HETargetTracker", "EntropyAnchor", "AERController"
]  # fmt: skip

AllReduce = Callable[[torch.Tensor], torch.Tensor]
NUM_BUCKETS = 3


def identity_all_reduce(t: torch.Tensor) -> torch.Tensor:
    """Single-process all-reduce: the statistics already are global."""
    return t


def _reduce(fn: AllReduce, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """Sum several local tensors across ranks in one collective (float64, CPU result)."""
    flat = [torch.as_tensor(t, dtype=torch.float64).detach().reshape(-1) for t in tensors]
    sizes = [f.numel() for f in flat]
    out = fn(torch.cat([f.to(flat[0].device) for f in flat])).detach().cpu().to(torch.float64)
    return list(out.split(sizes))


class _Stateful:
    _state_keys: tuple[str, ...] = ()

    def state_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v := getattr(self, k), list) else v) for k in self._state_keys}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = [k for k in self._state_keys if k not in state]
        if missing:
            raise UsageError(f"{type(self).__name__} state lacks {missing}")
        for k in self._state_keys:
            v = state[k]
            setattr(self, k, list(v) if isinstance(v, (list, tuple)) else v)


class KLController(_Stateful):
    """Per-bucket KL-loss multiplier κ_d (ARES eq. 27; algorithm 1 lines 33-34).

    κ_d ← clip(κ_d (1 + α_κ (KL̂_d / δ_d − 1)), κ_min, κ_max), where KL̂_d is the *non-window* KL of
    bucket d this step (see :func:`~ares_cli.algorithms.aepo_kl.nonwindow_kl_stats`), optionally smoothed
    by an EMA (``ema_decay`` > 0; eq. 27 calls KL̂ a moving average, algorithm 1 uses the step value).
    A bucket with no data this step keeps its κ_d.
    """

    _state_keys = ("kappa", "kl_hat", "steps")

    def __init__(
        self,
        init: float | Sequence[float] = 0.01,
        target: Sequence[float] = (0.02, 0.05, 0.1),
        step_size: float = 0.1,
        kappa_min: float = 1e-4,
        kappa_max: float = 1.0,
        ema_decay: float = 0.0,
        all_reduce: AllReduce | None = None,
    ):
        init_l = [float(init)] * NUM_BUCKETS if isinstance(init, (int, float)) else [float(x) for x in init]
        if len(init_l) != NUM_BUCKETS or len(target) != NUM_BUCKETS:
            raise UsageError("KLController needs one init and one target per bucket (easy, medium, hard)")
        if any(t <= 0 for t in target):
            raise UsageError("KL targets delta_d must be > 0")
        if not 0 < kappa_min <= kappa_max:
            raise UsageError("need 0 < kappa_min <= kappa_max")
        self.target = [float(t) for t in target]
        self.step_size, self.kappa_min, self.kappa_max = float(step_size), float(kappa_min), float(kappa_max)
        self.ema_decay = float(ema_decay)
        self.all_reduce = all_reduce or identity_all_reduce
        self.kappa = [min(max(k, self.kappa_min), self.kappa_max) for k in init_l]
        self.kl_hat: list[float | None] = [None] * NUM_BUCKETS
        self.steps = 0

    def update(self, kl_sum: torch.Tensor, count: torch.Tensor) -> list[float]:
        """One controller step from local per-bucket sums: KL_ctrl_d = Σ kl / Σ count after all-reduce."""
        s, c = _reduce(self.all_reduce, kl_sum, count)
        for d in range(NUM_BUCKETS):
            if c[d] <= 0:
                continue
            kl = float(s[d] / c[d])
            prev = self.kl_hat[d]
            kl = (
                kl
                if prev is None or self.ema_decay <= 0
                else self.ema_decay * prev + (1 - self.ema_decay) * kl
            )
            self.kl_hat[d] = kl
            new = self.kappa[d] * (1.0 + self.step_size * (kl / self.target[d] - 1.0))
            self.kappa[d] = min(max(new, self.kappa_min), self.kappa_max)
        self.steps += 1
        return list(self.kappa)

    def kappa_tensor(self, device: torch.device | str | None = None) -> torch.Tensor:
        return torch.tensor(self.kappa, dtype=torch.float32, device=device)


class ThresholdEMA(_Stateful):
    """EMA of the batch HWE threshold (the ``ema`` option of section 3.2.1's τ_high).

    τ_ema ← decay·τ_ema + (1 − decay)·τ_batch; the first call initialises τ_ema = τ_batch. Applied in the
    same step (the reference code applies it one step late). ``update`` takes the global τ_batch.
    """

    _state_keys = ("value", "steps")

    def __init__(self, decay: float = 0.99):
        if not 0.0 <= decay < 1.0:
            raise UsageError(f"threshold EMA decay must lie in [0, 1), got {decay}")
        self.decay = float(decay)
        self.value: float | None = None
        self.steps = 0

    def update(self, tau: torch.Tensor | float) -> float:
        t = float(tau)
        self.value = t if self.value is None else self.decay * self.value + (1 - self.decay) * t
        self.steps += 1
        return self.value


@dataclass(frozen=True)
class BucketMoments:
    """Global per-bucket count, mean and (population) variance of N_HE, each a float64 tensor [3]."""

    count: torch.Tensor
    mean: torch.Tensor
    var: torch.Tensor


class HETargetTracker(_Stateful):
    """Source of the hierarchical-reward target N_target(d) (ARES section 3.2.2).

    As written, N_target(d) = E_batch[N_HE | d] of the same batch, so λ_d ≡ 0; the source is therefore an
    option: ``"ema"`` (default: EMA over *previous* batches; λ_d reacts when a bucket's exploration drifts
    from its recent level), ``"running_mean"`` (count-weighted mean over all previous batches), ``"fixed"``
    (constant per bucket) and ``"batch"`` (the paper as written; λ_d = 0). A bucket without history uses
    the current batch mean, so its first step has λ_d = 0. :meth:`targets` must precede :meth:`update`.
    """

    _state_keys = ("value", "seen", "steps")

    def __init__(
        self,
        source: str = "ema",
        decay: float = 0.9,
        fixed: Sequence[float] | None = None,
        all_reduce: AllReduce | None = None,
    ):
        if source not in ("ema", "running_mean", "fixed", "batch"):
            raise UsageError(f"unknown target source {source!r}; valid: ema, running_mean, fixed, batch")
        if source == "fixed" and (fixed is None or len(fixed) != NUM_BUCKETS):
            raise UsageError("target source 'fixed' needs three values (easy, medium, hard)")
        if not 0.0 <= decay < 1.0:
            raise UsageError(f"target EMA decay must lie in [0, 1), got {decay}")
        self.source, self.decay = source, float(decay)
        self.fixed = [float(x) for x in fixed] if fixed is not None else None
        self.all_reduce = all_reduce or identity_all_reduce
        self.value: list[float] = [0.0] * NUM_BUCKETS
        self.seen: list[float] = [0.0] * NUM_BUCKETS  # responses seen per bucket (running-mean weights)
        self.steps = 0

    def moments(self, n_he: torch.Tensor, buckets: torch.Tensor) -> BucketMoments:
        """Global per-bucket moments of N_HE from this rank's responses (one all-reduce)."""
        x = n_he.detach().to(torch.float64).reshape(-1)
        b = buckets.reshape(-1).to(x.device)
        onehot = torch.nn.functional.one_hot(b, NUM_BUCKETS).to(torch.float64)
        cnt, s1, s2 = _reduce(self.all_reduce, onehot.sum(0), onehot.T @ x, onehot.T @ (x * x))
        mean = s1 / cnt.clamp(min=1.0)
        var = (s2 / cnt.clamp(min=1.0) - mean * mean).clamp(min=0.0)
        return BucketMoments(cnt, mean, var)

    def targets(self, m: BucketMoments) -> torch.Tensor:
        """N_target(d) for this step, float64 [3] (before this batch is folded into the history)."""
        if self.source == "fixed":
            return torch.tensor(self.fixed, dtype=torch.float64)
        out = m.mean.clone()
        if self.source != "batch":
            for d in range(NUM_BUCKETS):
                if self.seen[d] > 0:
                    out[d] = self.value[d]
        return out

    def update(self, m: BucketMoments) -> None:
        for d in range(NUM_BUCKETS):
            c, mu = float(m.count[d]), float(m.mean[d])
            if c <= 0:
                continue
            if self.seen[d] <= 0:
                self.value[d] = mu
            elif self.source == "running_mean":
                self.value[d] = (self.value[d] * self.seen[d] + mu * c) / (self.seen[d] + c)
            else:
                self.value[d] = self.decay * self.value[d] + (1 - self.decay) * mu
            self.seen[d] += c
        self.steps += 1


class EntropyAnchor(_Stateful):
    """PAEC's entropy anchor H0 = (1/K) Σ_{t<=K} H̄_t (PAEC eq. 12; algorithm 1 lines 21-26).

    Call :meth:`update` once per training step with the local numerator Σ m·H' and denominator Σ m of
    eq. 11 (all-reduced here). During the first K steps H0 is the running mean of the H̄ seen so far
    (including this step, as algorithm 1 updates it before using it); afterwards it is frozen.
    """

    _state_keys = ("total", "count", "steps")

    def __init__(self, init_steps: int = 4, eps: float = 1e-6, all_reduce: AllReduce | None = None):
        if init_steps < 1:
            raise UsageError(f"anchor init_steps must be >= 1, got {init_steps}")
        self.init_steps, self.eps = int(init_steps), float(eps)
        self.all_reduce = all_reduce or identity_all_reduce
        self.total, self.count, self.steps = 0.0, 0, 0

    @property
    def h0(self) -> float | None:
        return self.total / self.count if self.count else None

    @property
    def frozen(self) -> bool:
        return self.count >= self.init_steps

    def update(self, weighted_entropy_sum: torch.Tensor | float, mask_sum: torch.Tensor | float) -> float:
        """Fold this step's global H̄ (eq. 11) into H0 while t <= K; returns H0."""
        num, den = _reduce(self.all_reduce, torch.as_tensor(weighted_entropy_sum), torch.as_tensor(mask_sum))
        h_bar = float(num.sum() / (den.sum() + self.eps))
        if not self.frozen:
            self.total += h_bar
            self.count += 1
        self.steps += 1
        return float(self.h0)

    def h_low(self, rho_min: float) -> float | None:
        """H_low = ρ_min·H0 (PAEC section 3.2); None before the first update."""
        return None if self.h0 is None else rho_min * self.h0


class AERController(_Stateful):
    """AER's global entropy coefficient α and its anchor H0 (``shared/notes/aer.md``; :mod:`.aer`).

    :meth:`anchor` folds a step's pre-update per-token mean entropy into H0 during the first
    ``anchor_steps`` steps (then H0 is frozen); :meth:`update` moves α towards H* = τ·H0 from the global
    per-token mean entropy H_t. Both take local (Σ H, Σ tokens) and all-reduce them.
    """

    _state_keys = ("alpha", "h0_total", "h0_count", "steps", "last_entropy")

    def __init__(self, cfg, all_reduce: AllReduce | None = None):
        self.cfg = cfg
        self.all_reduce = all_reduce or identity_all_reduce
        self.alpha = float(cfg.coef_init)
        self.h0_total, self.h0_count, self.steps = 0.0, 0, 0
        self.last_entropy: float | None = None

    @property
    def h0(self) -> float | None:
        return self.h0_total / self.h0_count if self.h0_count else None

    @property
    def target(self) -> float | None:
        return None if self.h0 is None else self.cfg.target_ratio * self.h0

    def _mean(self, h_sum, count) -> float | None:
        s, c = _reduce(self.all_reduce, torch.as_tensor(h_sum), torch.as_tensor(count))
        return float(s.sum() / c.sum()) if float(c.sum()) > 0 else None

    def anchor(self, h_sum, count) -> float | None:
        """H0 = mean of the first K steps' global per-token entropies; returns H0."""
        h = self._mean(h_sum, count)
        if self.h0_count < self.cfg.anchor_steps and h is not None:
            self.h0_total += h
            self.h0_count += 1
        return self.h0

    def update(self, h_sum, count) -> float:
        """α ← rule(α, H_t, H*) from this step's global entropy (α unchanged without an anchor or tokens)."""
        from ares_cli.algorithms.aer import coef_update

        h = self._mean(h_sum, count)
        if h is not None and self.target is not None:
            self.alpha = coef_update(self.alpha, h, self.target, self.cfg)
            self.last_entropy = h
        self.steps += 1
        return self.alpha
