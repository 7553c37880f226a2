"""AEPO "when to explore": window entropy, the batch threshold, HWE masks and trigger words.

ARES paper (Adaptive-Entropy Policy Optimization), sections 2.1 and 3.2.1, appendices B, D, G, H, J and
algorithm 1 lines 7-12. The reward shaping ("how much to explore") lives in :mod:`.aepo_reward`, the
token-adaptive KL and per-step metrics in :mod:`.aepo_kl`, stateful pieces in :mod:`.controllers`.

Conventions: ``entropy`` is the full-vocabulary token entropy H_t (eq. 3) of the sampled response, shape
[N, T]; ``mask`` is the [N, T] response mask (1 = response token, 0 = prompt/padding). Padding never
enters a window, a quantile or a count. Difficulty buckets (integer codes ``EASY, MEDIUM, HARD``) live in
:mod:`.buckets`.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

import torch

# Compatibility path: the difficulty buckets moved to ares_cli.algorithms.buckets; their names keep working
# from here for code written against this module. Project code imports them from buckets.
from ares_cli.algorithms.buckets import (  # noqa: F401
    BUCKETS,
    EASY,
    HARD,
    MEDIUM,
    bucket_bounds,
    bucket_ids,
    difficulty_bucket,
)
from ares_cli.config import option
from ares_cli.errors import UsageError

__all__ = [
    "WINDOW_MODES", "END_RULES", "KL_SCOPES", "THRESHOLD_MODES", "REWARD_VARIANTS", "TARGET_SOURCES",
    "LAMBDA_MODES", "KL_CTRL_SIGNALS", "AEPOConfig", "window_entropy", "full_window_starts", "window_cover",
    "masked_row_quantile", "AllReduce", "AllGather", "batch_threshold", "hwe_mask", "count_hwe",
    "trigger_token_ids", "trigger_mask", "HWEDetection", "detect_hwe"
]  # fmt: skip

WINDOW_MODES = ("paper", "next")
END_RULES = ("full", "shrink")
KL_SCOPES = ("window", "start")
THRESHOLD_MODES = ("mean", "median", "ema")
REWARD_VARIANTS = ("paper", "appendix_i", "alg1")
TARGET_SOURCES = ("ema", "running_mean", "fixed", "batch")
LAMBDA_MODES = ("paper", "directional")
KL_CTRL_SIGNALS = ("sequence", "alg1", "token")


@dataclass(frozen=True)
class AEPOConfig:
    """Every AEPO constant, with the paper's default where the paper gives one (see docs/methods.md)."""

    window: int = option(4, "w of eq. 4: tokens per entropy window (paper: 4-8 best, sec. 2.1).")
    window_mode: str = option(
        "paper", '"paper": H_t..H_{t+w-1} (eq. 4); "next": H_{t+1}..H_{t+w} (reference code).'
    )
    end_rule: str = option(
        "full",
        '"full": only positions whose whole window fits can start one (eq. 12); "shrink": window shrinks.',
    )
    quantile: float = option(
        0.95, "Per-trajectory entropy quantile of the threshold (sec. 3.2.1, alg. 1 line 9)."
    )
    threshold_mode: str = option(
        "mean", '"mean" of per-row quantiles (paper), "median" of them, or "ema" of the mean.'
    )
    threshold_ema_decay: float = option(0.99, 'Decay of the "ema" threshold (reference code\'s 0.99).')
    use_trigger_vocab: bool = option(
        False, "Appendix H: count only positions whose sampled token is a trigger word."
    )
    trigger_words: tuple[str, ...] = option((), "The trigger vocabulary when use_trigger_vocab is on.")
    # read by every algorithm: the buckets split each step's solve-rate metrics by difficulty
    easy_pass_frac: float = option(
        0.75, "Easy iff n_correct >= ceil(0.75 n) (6 of 8, eq. 10).", every_algorithm=True
    )
    hard_pass_frac: float = option(
        0.25, "Hard iff n_correct <= floor(0.25 n) (2 of 8, eq. 10).", every_algorithm=True
    )
    reward_shaping: bool = option(
        True, "Hierarchical entropy reward (sec. 3.2.2); false = plain accuracy reward (table 5 ablation)."
    )
    reward_variant: str = option(
        "paper",
        '"paper": penalise incorrect only (sec. 3.2.2); "appendix_i": fig. 9; "alg1": R_acc+S_d-lam C/Z.',
    )
    easy_explore: float = option(
        0.1,
        "appendix_i: mu, the mild encouragement of failed easy answers below target (fraction of lam).",
        ge=0.0,
        le=1.0,
    )
    alg1_norm: str = option("length", 'alg1: Z of C_ent/Z, "length" (L_i) or "target" (N_target(d)).')
    target_source: str = option(
        "ema", 'N_target(d): "ema" of previous batches, "running_mean", "fixed", "batch".'
    )
    target_ema_decay: float = option(0.9, 'Decay of the "ema" target (about a 10-step memory; our choice).')
    target_fixed: tuple[float, float, float] | None = option(
        None, 'N_target per bucket for target_source="fixed".'
    )
    lambda_mode: str = option(
        "paper", '"paper": max(0, mean-target)/(var+eps); "directional": sign follows g_d.'
    )
    lambda_eps: float = option(1.0, "eps of lambda_d, in counts^2 (keeps lambda bounded when Var = 0).")
    shaping_cap: float = option(
        1.0, "Largest |shaping| added to R_acc (bounds lambda_d * g_d; our safeguard)."
    )
    token_bonus: bool = option(False, "Algorithm 1 line 19: add psi_{i,t} to the token advantages.")
    token_bonus_phi: str = option("identity", 'phi of psi: "identity" or "tanh".')
    token_bonus_baseline: str = option(
        "mean", 'b_i of psi: "mean" (per-response mean of the bonus) or "none".'
    )
    dynamic_kl: bool = option(
        True, "Token-adaptive KL with the kappa_d controller (eq. 1, 27); false = uniform kl_init (table 5)."
    )
    kl_rho: float = option(0.5, "rho < 1 of eq. 1 inside HWE windows (paper gives no value).")
    kl_scope: str = option(
        "window",
        '"window": relax every token of a flagged window (eq. 1, app. D); "start": its first (alg. 1).',
    )
    kl_beta: tuple[float, float, float] = option((1.0, 1.0, 1.0), "beta_d of eq. 1 (easy, medium, hard).")
    kl_target: tuple[float, float, float] = option(
        (0.02, 0.05, 0.1), "delta_d of eq. 27 (paper gives no value)."
    )
    kl_init: float = option(0.01, "Initial kappa_d of eq. 27 (every bucket).")
    kl_step_size: float = option(0.1, "alpha_kappa of eq. 27.")
    kl_min: float = option(1e-4, "kappa_min of eq. 27.")
    kl_max: float = option(1.0, "kappa_max of eq. 27.")
    kl_ctrl_signal: str = option(
        "sequence", 'KL_ctrl: "sequence" mean of non-window means, "alg1" (/L_i), "token".'
    )
    kl_ctrl_ema_decay: float = option(
        0.0, "Moving average of KL_ctrl (eq. 27's KL-hat); 0 = this step (alg. 1)."
    )

    def __post_init__(self) -> None:
        _choice("window_mode", self.window_mode, WINDOW_MODES)
        _choice("end_rule", self.end_rule, END_RULES)
        _choice("kl_scope", self.kl_scope, KL_SCOPES)
        _choice("threshold_mode", self.threshold_mode, THRESHOLD_MODES)
        _choice("reward_variant", self.reward_variant, REWARD_VARIANTS)
        _choice("target_source", self.target_source, TARGET_SOURCES)
        _choice("lambda_mode", self.lambda_mode, LAMBDA_MODES)
        _choice("kl_ctrl_signal", self.kl_ctrl_signal, KL_CTRL_SIGNALS)
        _choice("alg1_norm", self.alg1_norm, ("length", "target"))
        if not 0.0 <= self.easy_explore <= 1.0:
            raise UsageError(f"easy_explore must lie in [0, 1], got {self.easy_explore}")
        _choice("token_bonus_phi", self.token_bonus_phi, ("identity", "tanh"))
        _choice("token_bonus_baseline", self.token_bonus_baseline, ("mean", "none"))
        if self.window < 1:
            raise UsageError(f"window must be >= 1, got {self.window}")
        if not 0.0 <= self.quantile <= 1.0:
            raise UsageError(f"quantile must lie in [0, 1], got {self.quantile}")
        if not 0.0 <= self.hard_pass_frac < self.easy_pass_frac <= 1.0:
            raise UsageError("need 0 <= hard_pass_frac < easy_pass_frac <= 1")
        if not 0.0 < self.kl_rho <= 1.0:
            raise UsageError(f"kl_rho must lie in (0, 1], got {self.kl_rho}")
        if not 0.0 < self.kl_min <= self.kl_init <= self.kl_max:
            raise UsageError("need 0 < kl_min <= kl_init <= kl_max")
        if self.target_source == "fixed" and self.target_fixed is None:
            raise UsageError("target_source='fixed' needs target_fixed (easy, medium, hard)")
        if self.token_bonus and not self.reward_shaping:
            raise UsageError("token_bonus needs reward_shaping (psi is scaled by the shaping's lambda_d)")
        if self.use_trigger_vocab and not self.trigger_words:
            raise UsageError("use_trigger_vocab needs a non-empty trigger_words list")

    @classmethod
    def field_help(cls) -> dict[str, str]:
        """Field name -> default, for docs and ``--help`` listings."""
        return {f.name: repr(f.default) for f in fields(cls)}


def _choice(name: str, value: str, valid: Iterable[str]) -> None:
    if value not in valid:
        raise UsageError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")


def window_entropy(
    entropy: torch.Tensor, mask: torch.Tensor, window: int = 4, mode: str = "paper"
) -> torch.Tensor:
    """Sliding-window entropy H̄_{t:w} (eq. 4, appendix D; eq. 12 of appendix J).

    ``mode="paper"``: H̄_{t:w} = mean of H_t .. H_{t+w-1}. ``mode="next"`` (the authors' code): mean of
    H_{t+1} .. H_{t+w}, excluding t. Sequence-end rule (both modes): the mean runs over the *valid*
    positions inside the window only, so near the end of a response the window shrinks to the tokens that
    exist (t..end); padding is never counted. Under "next" the last token has no successor and falls back to
    its own H_t. ``end_rule="full"`` (the default of :func:`detect_hwe`) then lets only complete windows
    start a high-entropy window (:func:`full_window_starts`). Returns [N, T], zero at padding. No gradient
    flows (it is a detection statistic).
    """
    if window < 1:
        raise UsageError(f"window must be >= 1, got {window}")
    _choice("window mode", mode, WINDOW_MODES)
    valid = mask.bool()
    h = torch.where(valid, entropy.detach(), torch.zeros((), dtype=entropy.dtype, device=entropy.device))
    m = valid.to(h.dtype)
    shift = 0 if mode == "paper" else 1
    pad = window - 1 + shift
    vals = torch.nn.functional.pad(h * m, (0, pad)).unfold(1, window, 1)[:, shift:]
    cnts = torch.nn.functional.pad(m, (0, pad)).unfold(1, window, 1)[:, shift:]
    sums, counts = vals.sum(-1), cnts.sum(-1)
    out = torch.where(counts > 0, sums / counts.clamp(min=1), h)
    return torch.where(valid, out, torch.zeros_like(out))


def _window_span(window: int, mode: str) -> tuple[int, int]:
    """(first, last) offset of the positions a window starting at t averages: paper t..t+w-1, next t+1..t+w."""
    _choice("window mode", mode, WINDOW_MODES)
    shift = 0 if mode == "paper" else 1
    return shift, window - 1 + shift


def full_window_starts(mask: torch.Tensor, window: int = 4, mode: str = "paper") -> torch.Tensor:
    """Bool [N, T]: response positions whose whole window lies inside the response (``end_rule="full"``).

    Eq. 12 writes H̄_{t:w} = (1/w) Σ_{τ=t}^{t+w-1} H_τ and eq. 13 sums t = 1..L, saying nothing of the last
    w − 1 positions; our reading takes the w-token mean as the definition, so only t ≤ L − w + 1 start one.
    Under "shrink" those positions average fewer tokens, so their mean varies more and crosses a high
    threshold more often (docs/methods.md gives the measured rates). Response tokens are a valid prefix.
    """
    _, last = _window_span(window, mode)
    lengths = mask.bool().sum(1, keepdim=True)
    pos = torch.arange(mask.shape[1], device=mask.device)[None]
    return (pos + last < lengths) & mask.bool()


def window_cover(
    starts: torch.Tensor, mask: torch.Tensor, window: int = 4, mode: str = "paper"
) -> torch.Tensor:
    """Bool [N, T]: the tokens inside at least one flagged window (eq. 1's t ∈ W^valid; appendix D).

    A window flagged at t covers t..t+w-1 ("paper") or t+1..t+w ("next"), clipped to the response.
    """
    first, last = _window_span(window, mode)
    x = torch.nn.functional.pad(starts.bool().to(torch.float32), (last, 0))
    covered = x.unfold(1, last - first + 1, 1)[:, : starts.shape[1]].amax(-1) > 0
    return covered & mask.bool()


def masked_row_quantile(
    values: torch.Tensor, mask: torch.Tensor, q: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """q-quantile of each row's valid entries, linear interpolation (numpy's default "linear" method).

    With n valid entries sorted as x_0 <= .. <= x_{n-1}: pos = q (n-1), result = x_lo + (pos-lo)(x_hi-x_lo).
    A row with one valid entry returns it; a row with none returns 0 and is flagged in the second output
    (``has_values``). Sorts rows instead of calling ``torch.quantile`` (which fails above 2^24 elements).
    """
    if not 0.0 <= q <= 1.0:
        raise UsageError(f"quantile must lie in [0, 1], got {q}")
    valid = mask.bool()
    n = valid.sum(dim=1)
    v = values.detach()
    srt = v.masked_fill(~valid, float("inf")).sort(dim=1).values
    pos = q * (n - 1).clamp(min=0).to(torch.float64)
    lo = pos.floor().long().clamp(max=max(v.shape[1] - 1, 0))
    hi = pos.ceil().long().clamp(max=max(v.shape[1] - 1, 0))
    frac = (pos - lo.to(torch.float64)).to(v.dtype)
    has = n > 0
    if v.shape[1] == 0:
        return torch.zeros(v.shape[0], dtype=v.dtype, device=v.device), has
    x_lo = srt.gather(1, lo[:, None]).squeeze(1)
    x_hi = srt.gather(1, hi[:, None]).squeeze(1)
    x_lo = torch.where(has, x_lo, torch.zeros_like(x_lo))
    x_hi = torch.where(has, x_hi, torch.zeros_like(x_hi))
    return x_lo + frac * (x_hi - x_lo), has


AllReduce = Callable[[torch.Tensor], torch.Tensor]
AllGather = Callable[[torch.Tensor], torch.Tensor]  # 1-D tensor -> every rank's, concatenated in rank order


def batch_threshold(
    entropy: torch.Tensor,
    mask: torch.Tensor,
    quantile: float = 0.95,
    reduce: str = "mean",
    all_reduce: AllReduce | None = None,
    all_gather: AllGather | None = None,
) -> torch.Tensor:
    """Batch HWE threshold τ_high (section 3.2.1; algorithm 1 lines 9-10), global over ranks.

    τ = (1/|D|) Σ_y Quantile_0.95({H_t(y)}) over trajectories with at least one response token.
    ``reduce="median"`` takes the median of the per-row quantiles instead (the reference code); the
    ``ema`` option is the :class:`~ares_cli.algorithms.controllers.ThresholdEMA` controller on top of the
    mean. ``all_reduce`` (sum across ranks) makes the mean global; ``all_gather`` (concatenation of a 1-D
    tensor across ranks) makes the median global: every rank gathers every rank's per-row quantiles, so
    all ranks take the same τ. Returns a 0-dim tensor (0 for an empty batch).
    """
    q, has = masked_row_quantile(entropy, mask, quantile)
    if reduce == "median":
        vals = q[has]
        if all_gather is not None:
            vals = all_gather(vals.to(torch.float64)).to(q.dtype)
        if vals.numel() == 0:
            return torch.zeros((), dtype=q.dtype, device=q.device)
        srt = vals.sort().values
        k = vals.numel()
        return 0.5 * (srt[(k - 1) // 2] + srt[k // 2])
    if reduce != "mean":
        raise UsageError(f"unknown threshold reduce {reduce!r}; valid: mean, median")
    stats = torch.stack([(q * has).sum(), has.sum().to(q.dtype)]).to(torch.float64)
    if all_reduce is not None:
        stats = all_reduce(stats)
    return (stats[0] / stats[1].clamp(min=1.0)).to(q.dtype)


def hwe_mask(
    window_ent: torch.Tensor,
    mask: torch.Tensor,
    threshold: torch.Tensor | float,
    trigger: torch.Tensor | None = None,
) -> torch.Tensor:
    """HWE indicator m_{i,t} = 1[H̄_{t:w} >= τ] (eq. 12; algorithm 1 line 10), boolean [N, T].

    Padding is always 0. With ``trigger`` (appendix H) a position counts only if it is also a trigger
    position (the caller's [N, T] boolean "sampled token is a trigger word", see :func:`trigger_mask`).
    """
    out = (window_ent >= threshold) & mask.bool()
    if trigger is not None:
        out = out & trigger.bool()
    return out


def count_hwe(m: torch.Tensor) -> torch.Tensor:
    """N_HE per response = Σ_t m_{i,t} (eq. 13), as float [N]."""
    return m.to(torch.float32).sum(dim=1)


def _normalise_word(text: str) -> str:
    return text.strip().strip(string.punctuation + "“”‘’").strip().lower()


def trigger_token_ids(tokenizer, words: Iterable[str]) -> set[int]:
    """Token ids whose own decoded text is a trigger word (appendix H vocabulary V_sem).

    Each vocabulary id is decoded alone; surrounding whitespace and punctuation are stripped and the text
    lower-cased before matching the lower-cased word list. Words that a tokenizer always splits into several
    tokens cannot match (the rule is per sampled token, never the argmax).
    """
    wanted = {_normalise_word(w) for w in words if _normalise_word(w)}
    ids: set[int] = set()
    size = len(tokenizer)
    for tid in range(size):
        text = tokenizer.decode([tid], skip_special_tokens=True)
        if text and _normalise_word(text) in wanted:
            ids.add(tid)
    return ids


def trigger_mask(token_ids: torch.Tensor, trigger_ids: Iterable[int]) -> torch.Tensor:
    """[N, T] boolean: the *sampled* token at each position is in the trigger-id set (appendix H)."""
    ids = torch.tensor(sorted(set(trigger_ids)), dtype=token_ids.dtype, device=token_ids.device)
    return torch.isin(token_ids, ids)


@dataclass(frozen=True)
class HWEDetection:
    """Output of :func:`detect_hwe`: everything "when to explore" decides for one batch."""

    threshold: torch.Tensor  # τ used for the mask (after the EMA when threshold_mode="ema")
    batch_threshold: torch.Tensor  # this batch's τ (mean or median of per-row quantiles)
    window_entropy: torch.Tensor  # H̄_{t:w}, [N, T]
    hwe: torch.Tensor  # m_{i,t}, bool [N, T]
    n_he: torch.Tensor  # N_HE per response, [N]
    covered: torch.Tensor  # tokens inside a flagged window, bool [N, T] (window_cover)


def detect_hwe(
    entropy: torch.Tensor,
    mask: torch.Tensor,
    cfg: AEPOConfig,
    *,
    ema=None,
    trigger: torch.Tensor | None = None,
    all_reduce: AllReduce | None = None,
    all_gather: AllGather | None = None,
) -> HWEDetection:
    """Window entropy (eq. 4) → threshold τ (sec. 3.2.1) → HWE mask (eq. 12) → N_HE (eq. 13) per config.

    ``cfg.end_rule="full"`` lets only positions whose whole window fits start one (:func:`full_window_starts`).
    ``ema`` is the :class:`~ares_cli.algorithms.controllers.ThresholdEMA` required (and updated) when
    ``threshold_mode="ema"``; ``trigger`` the appendix-H positions, required when ``use_trigger_vocab``.
    """
    reduce = "median" if cfg.threshold_mode == "median" else "mean"
    tau_b = batch_threshold(entropy, mask, cfg.quantile, reduce=reduce, all_reduce=all_reduce,
                            all_gather=all_gather)  # fmt: skip
    tau = tau_b
    if cfg.threshold_mode == "ema":
        if ema is None:
            raise UsageError("threshold_mode='ema' needs a ThresholdEMA controller")
        tau = torch.tensor(ema.update(tau_b), dtype=tau_b.dtype, device=tau_b.device)
    if cfg.use_trigger_vocab and trigger is None:
        raise UsageError("use_trigger_vocab is on: pass the trigger positions (see trigger_mask)")
    win = window_entropy(entropy, mask, cfg.window, cfg.window_mode)
    eligible = full_window_starts(mask, cfg.window, cfg.window_mode) if cfg.end_rule == "full" else mask
    m = hwe_mask(win, eligible, tau, trigger if cfg.use_trigger_vocab else None)
    return HWEDetection(tau, tau_b, win, m, count_hwe(m), window_cover(m, mask, cfg.window, cfg.window_mode))
