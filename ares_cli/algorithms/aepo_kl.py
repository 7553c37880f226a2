"""AEPO token-adaptive KL (ARES eq. 1, algorithm 1 lines 24-34) and per-step AEPO metrics.

The KL *loss* (eq. 2: −β_{d(i),t} D_KL inside the objective, algorithm 1 line 29) is aggregated by the
trainer with its loss-aggregation convention; this module provides the per-token coefficients, the
non-window control signal for :class:`~ares_cli.algorithms.controllers.KLController` (eq. 27) and the
metrics dictionary.
"""

from __future__ import annotations

import torch

from ares_cli.algorithms.aepo import AEPOConfig, _choice
from ares_cli.algorithms.buckets import BUCKETS
from ares_cli.algorithms.controllers import NUM_BUCKETS, BucketMoments, KLController

__all__ = [
    "token_kl_weights", "token_kl_coef", "aepo_kl_coef", "nonwindow_kl_stats", "aepo_step_metrics",
    "kl_controller_from_config"
]  # fmt: skip


def token_kl_weights(
    hwe: torch.Tensor, mask: torch.Tensor, buckets: torch.Tensor, beta: torch.Tensor | tuple, rho: float
) -> torch.Tensor:
    """β_{i,t} = β_{d(i)}·ρ^{m_{i,t}} (eq. 1; algorithm 1 line 25): ρ < 1 relaxes KL inside HWE windows.

    Returns float32 [N, T], zero at padding.
    """
    b = torch.as_tensor(beta, dtype=torch.float32, device=hwe.device)[buckets.to(hwe.device)]
    one = torch.ones((), dtype=torch.float32, device=hwe.device)
    relax = torch.where(hwe.bool(), one * rho, one)
    return b[:, None] * relax * mask.to(torch.float32)


def token_kl_coef(
    hwe: torch.Tensor,
    mask: torch.Tensor,
    buckets: torch.Tensor,
    kappa: torch.Tensor | list[float],
    beta: torch.Tensor | tuple,
    rho: float,
) -> torch.Tensor:
    """κ_{d(i)}·β_{i,t}: the per-token weight of kld_{i,t} in L_KL (algorithm 1 line 29), [N, T]."""
    k = torch.as_tensor(kappa, dtype=torch.float32, device=hwe.device)[buckets.to(hwe.device)]
    return k[:, None] * token_kl_weights(hwe, mask, buckets, beta, rho)


def aepo_kl_coef(
    hwe: torch.Tensor,
    mask: torch.Tensor,
    buckets: torch.Tensor,
    kappa: torch.Tensor | list[float],
    cfg: AEPOConfig,
) -> torch.Tensor:
    """The per-token KL-loss weight AEPO hands the trainer, [N, T], zero at padding.

    ``cfg.dynamic_kl`` (default): κ_d β_d ρ^{m_{i,t}} (:func:`token_kl_coef`). Off (ARES table 5 without
    the dynamic KL): the constant κ_0 = ``kl_init`` on every response token — a plain, uniform KL loss
    with AEPO's initial strength, no bucket β_d, no window relaxation ρ and no controller.
    """
    if not cfg.dynamic_kl:
        return cfg.kl_init * mask.to(torch.float32)
    return token_kl_coef(hwe, mask, buckets, kappa, cfg.kl_beta, cfg.kl_rho)


def nonwindow_kl_stats(
    kld: torch.Tensor, hwe: torch.Tensor, mask: torch.Tensor, buckets: torch.Tensor, signal: str = "sequence"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Local per-bucket (sum, count) of the KL controller's signal KL_ctrl (algorithm 1 line 33).

    Only non-window tokens (m_{i,t} = 0) contribute, never the relaxed window KL (appendix L). Signals:
    ``"sequence"`` (default): per response, the mean kld over its non-window tokens, then the mean over
    responses of the bucket (responses with no non-window token are skipped);
    ``"alg1"``: algorithm 1 literally, (1/L_i) Σ_t 1[m = 0] kld with L_i the full response length;
    ``"token"``: mean over all non-window tokens of the bucket.
    KL_ctrl_d = sum_d / count_d after the controller's all-reduce. Both outputs are float64 [3].
    """
    _choice("KL control signal", signal, ("sequence", "alg1", "token"))
    keep = (~hwe.bool()) & mask.bool()
    x = kld.detach().to(torch.float64) * keep
    onehot = torch.nn.functional.one_hot(buckets.to(kld.device), NUM_BUCKETS).to(torch.float64)
    if signal == "token":
        return onehot.T @ x.sum(1), onehot.T @ keep.sum(1).to(torch.float64)
    denom = (keep if signal == "sequence" else mask.bool()).sum(1).to(torch.float64)
    per_seq = x.sum(1) / denom.clamp(min=1.0)
    present = (denom > 0).to(torch.float64)
    return onehot.T @ (per_seq * present), onehot.T @ present


def aepo_step_metrics(
    *,
    threshold: torch.Tensor | float,
    hwe: torch.Tensor,
    mask: torch.Tensor,
    buckets: torch.Tensor,
    moments: BucketMoments | None = None,
    target: torch.Tensor | None = None,
    lam: torch.Tensor | None = None,
    kappa: list[float] | torch.Tensor | None = None,
    kl_ctrl: tuple[torch.Tensor, torch.Tensor] | None = None,
    batch_threshold_value: torch.Tensor | float | None = None,
) -> dict[str, float]:
    """Per-step AEPO metrics (local unless the inputs are global; ``moments`` from the tracker are global).

    Keys: ``aepo/threshold`` (τ used), ``aepo/threshold_batch``, ``aepo/window_frac`` (fraction of response
    tokens in HWE windows), ``aepo/n_he_mean`` and per bucket d: ``aepo/{d}/size`` (responses),
    ``aepo/{d}/n_he``, ``aepo/{d}/n_he_var``, ``aepo/{d}/target``, ``aepo/{d}/lambda``, ``aepo/{d}/kappa``,
    ``aepo/{d}/kl_nonwindow``, ``aepo/{d}/response_len``.
    """
    valid = mask.bool()
    m = hwe.bool() & valid
    n_he = m.sum(1).to(torch.float64)
    lens = valid.sum(1).to(torch.float64)
    out: dict[str, float] = {
        "aepo/threshold": float(threshold),
        "aepo/window_frac": float(m.sum()) / max(float(valid.sum()), 1.0),
        "aepo/n_he_mean": float(n_he.mean()) if n_he.numel() else 0.0,
    }
    if batch_threshold_value is not None:
        out["aepo/threshold_batch"] = float(batch_threshold_value)
    for d, name in enumerate(BUCKETS):
        sel = buckets.to(n_he.device) == d
        k = int(sel.sum())
        out[f"aepo/{name}/size"] = float(moments.count[d]) if moments is not None else float(k)
        if moments is not None:
            out[f"aepo/{name}/n_he"] = float(moments.mean[d])
            out[f"aepo/{name}/n_he_var"] = float(moments.var[d])
        else:
            out[f"aepo/{name}/n_he"] = float(n_he[sel].mean()) if k else 0.0
        out[f"aepo/{name}/response_len"] = float(lens[sel].mean()) if k else 0.0
        if target is not None:
            out[f"aepo/{name}/target"] = float(target[d])
        if lam is not None:
            out[f"aepo/{name}/lambda"] = float(lam[d])
        if kappa is not None:
            out[f"aepo/{name}/kappa"] = float(kappa[d])
        if kl_ctrl is not None:
            s, c = kl_ctrl
            out[f"aepo/{name}/kl_nonwindow"] = float(s[d] / c[d]) if float(c[d]) > 0 else 0.0
    return out


def kl_controller_from_config(cfg: AEPOConfig, all_reduce=None) -> KLController:
    """The per-bucket κ_d controller (eq. 27) with the config's constants."""
    return KLController(
        init=cfg.kl_init,
        target=cfg.kl_target,
        step_size=cfg.kl_step_size,
        kappa_min=cfg.kl_min,
        kappa_max=cfg.kl_max,
        ema_decay=cfg.kl_ctrl_ema_decay,
        all_reduce=all_reduce,
    )
