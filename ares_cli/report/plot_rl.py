"""Training curves from ``metrics.jsonl`` (rl and sft artifacts).

rl, per run: reward and accuracy, response length per difficulty bucket, mean token entropy and the
validation curve; AEPO's threshold τ (eq. 7), N_HE per bucket against its target, λ_d and κ_d and the
non-window KL per bucket (eqs. 8-10); PAEC's window entropy H̄ against H0 and H_low and its penalty
(PAEC eqs. 5-6); AER's entropy against its target when the run logged ``aer/*``. Several rl runs: the
main curves overlaid. sft: loss, learning rate, gradient norm and throughput. Only logged keys are drawn.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from ares_cli.report.figure_helpers import Artifact, legend_label, new_figure, read_rows, save

BUCKETS = {"easy": "tab:green", "medium": "tab:orange", "hard": "tab:red"}
# AER keys drawn on the entropy axis: entropy, target, H_t, H0, H*, hbar (not hard_frac or alpha)
_ENTROPY_LEVEL = re.compile(r"entropy|target|^h(_|\d|bar|star|$)", re.IGNORECASE)


def series(
    rows: list[dict[str, Any]], key: str, *, where: str | None = None
) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` over the rows that hold a finite number for it (and a positive
    ``where`` key, e.g. a bucket's size, when given)."""
    steps, values = [], []
    for row in rows:
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            continue
        if where is not None and not row.get(where):
            continue
        steps.append(int(row["step"]))
        values.append(float(value))
    return steps, values


def _line(ax, rows, key, label=None, *, where=None, **style) -> bool:
    steps, values = series(rows, key, where=where)
    if not steps:
        return False
    style.setdefault("marker", "o" if len(steps) <= 40 else None)
    style.setdefault("markersize", 3)
    style.setdefault("linewidth", 1.4)
    ax.plot(steps, values, label=legend_label(label or key), **style)
    return True


def _finish(ax, title: str, ylabel: str = "") -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    handles = ax.get_legend_handles_labels()[0]
    if len(handles) > 1:
        ax.legend(fontsize=7)
    elif not handles:
        ax.text(0.5, 0.5, "not logged", transform=ax.transAxes, ha="center", va="center", color="gray")


def _buckets(rows, pattern: str, ax, *, size_key: str | None = "aepo/{b}/size", **style) -> bool:
    """One line per difficulty bucket; steps where the bucket was empty (``size_key`` 0) are skipped."""
    drew = False
    for bucket, color in BUCKETS.items():
        where = size_key.format(b=bucket) if size_key else None
        drew |= _line(ax, rows, pattern.format(b=bucket), bucket, where=where, color=color, **style)
    return drew


def plot_run(art: Artifact, out_dir: Path) -> list[Path]:
    rows = read_rows(art.path / "metrics.jsonl")
    if art.kind == "sft":
        return _sft(rows, art, out_dir)
    keys = {k for row in rows for k in row}
    written = _training(rows, art, out_dir)
    if any(k.startswith("aepo/") for k in keys):
        written += _aepo(rows, art, out_dir)
    if any(k.startswith("paec/") for k in keys):
        written += _paec(rows, art, out_dir)
    if any(k.startswith("aer/") for k in keys):
        written += _aer(rows, sorted(k for k in keys if k.startswith("aer/")), art, out_dir)
    return written


def _training(rows, art: Artifact, out_dir: Path) -> list[Path]:
    fig, (reward, length, entropy, val) = new_figure(4, title=f"{art.label}: training")
    _line(reward, rows, "accuracy", "train accuracy", color="tab:blue", linewidth=3, alpha=0.5)
    _line(reward, rows, "reward", "reward", color="black", marker="x")
    _finish(reward, "reward and accuracy")
    _line(length, rows, "response_len", "all", color="black")
    _buckets(rows, "aepo/{b}/response_len", length, linestyle="--")
    _line(length, rows, "val/response_len", "validation", color="gray", linestyle=":", marker="s")
    _finish(length, "response length per difficulty", "tokens")
    _line(entropy, rows, "entropy", "mean token entropy", color="tab:purple")
    _finish(entropy, "mean token entropy", "nats")
    _line(val, rows, "val/accuracy", "held-out accuracy", color="tab:blue")
    _finish(val, "validation curve", "accuracy")
    return save(fig, out_dir, f"{art.label}-training")


def _aepo(rows, art: Artifact, out_dir: Path) -> list[Path]:
    fig, (tau, n_he, lam, kappa, kl) = new_figure(5, title=f"{art.label}: AEPO controllers")
    _line(tau, rows, "aepo/threshold", "τ (EMA)", color="black")
    _line(tau, rows, "aepo/threshold_batch", "batch quantile", color="gray", linestyle=":")
    _finish(tau, "high-entropy threshold τ (eq. 7)", "entropy")
    _buckets(rows, "aepo/{b}/n_he", n_he)
    for bucket, color in BUCKETS.items():
        _line(n_he, rows, f"aepo/{bucket}/target", "_target", where=f"aepo/{bucket}/size", color=color,
              linestyle=":", marker=None)  # fmt: skip
    _finish(n_he, "N_HE per bucket (dotted: target)", "tokens")
    _buckets(rows, "aepo/{b}/lambda", lam, size_key=None)
    _finish(lam, "λ_d per bucket (eq. 9)")
    _buckets(rows, "aepo/{b}/kappa", kappa, size_key=None)
    _finish(kappa, "κ_d per bucket (eq. 10)")
    _buckets(rows, "aepo/{b}/kl_nonwindow", kl)
    _finish(kl, "non-window KL per bucket")
    return save(fig, out_dir, f"{art.label}-aepo")


def _paec(rows, art: Artifact, out_dir: Path) -> list[Path]:
    fig, (h, penalty) = new_figure(2, title=f"{art.label}: PAEC entropy calibration")
    _line(h, rows, "paec/h_bar", "H̄ (window)", color="tab:purple")
    _line(h, rows, "paec/h0", "H0", color="black", linestyle="--", marker=None)
    _line(h, rows, "paec/h_low", "H_low", color="tab:red", linestyle=":", marker=None)
    _finish(h, "window entropy against H0 and H_low", "nats")
    _line(penalty, rows, "paec/penalty", "penalty", color="tab:brown")
    steps, active = series(rows, "paec/penalty_active")
    for i, (step, on) in enumerate(zip(steps, active, strict=True)):
        if on:
            penalty.axvspan(step - 0.5, step + 0.5, color="tab:red", alpha=0.12, lw=0,
                            label="penalty active" if i == active.index(on) else None)  # fmt: skip
    _finish(penalty, "entropy penalty (shaded: active)")
    return save(fig, out_dir, f"{art.label}-paec")


def _aer(rows, keys: list[str], art: Artifact, out_dir: Path) -> list[Path]:
    levels = [k for k in keys if _ENTROPY_LEVEL.search(k.rsplit("/", 1)[-1])]
    others = [k for k in keys if k not in levels]
    fig, axes = new_figure(2 if others else 1, title=f"{art.label}: AER")
    _line(axes[0], rows, "entropy", "mean token entropy", color="black")
    for key in levels:
        _line(axes[0], rows, key, key, linestyle=":" if "target" in key else "-")
    _finish(axes[0], "entropy against its target", "nats")
    for key in others:
        _line(axes[1], rows, key, key)
    if others:
        _finish(axes[1], "AER controller")
    return save(fig, out_dir, f"{art.label}-aer")


def _sft(rows, art: Artifact, out_dir: Path) -> list[Path]:
    fig, axes = new_figure(4, title=f"{art.label}: cold-start SFT")
    for ax, (key, title) in zip(axes, (("loss", "loss (assistant tokens)"), ("lr", "learning rate"),
                                       ("grad_norm", "gradient norm"), ("tokens_per_s", "tokens / s")),
                                strict=True):  # fmt: skip
        _line(ax, rows, key, key)
        _finish(ax, title)
    return save(fig, out_dir, f"{art.label}-sft")


def plot_runs_compared(arts: list[Artifact], out_dir: Path) -> list[Path]:
    """The main curves of several rl runs overlaid (one colour per run)."""
    runs = [(art.label, read_rows(art.path / "metrics.jsonl")) for art in arts]
    panels = (("reward", "reward"), ("entropy", "mean token entropy"), ("response_len", "response length"),
              ("val/accuracy", "validation accuracy"))  # fmt: skip
    fig, axes = new_figure(4, title="rl runs compared")
    # identical curves (e.g. a run whose extra term never changed a sample) must stay visible: each run
    # gets its own dash pattern, marker and a width that narrows, so a covered line still shows around it
    styles = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (1, 3)), "v")]
    for ax, (key, title) in zip(axes, panels, strict=True):
        for i, (label, rows) in enumerate(runs):
            dash, marker = styles[i % len(styles)]
            _line(ax, rows, key, label, linestyle=dash, marker=marker, linewidth=max(3.2 - 0.8 * i, 1.0),
                  markersize=max(6 - i, 3), alpha=0.85)  # fmt: skip
        _finish(ax, title)
    return save(fig, out_dir, "rl-compared")
