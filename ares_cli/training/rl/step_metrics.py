"""What one RL step reports: seconds per phase (:class:`Timer`), the rollout statistics, the algorithm's
metrics averaged over ranks, and the step's log line. Every statistic that sums over ranks is reduced here,
in the same order on every rank."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

PHASES = ("generate", "grade", "forward", "backward")


class Timer:
    """Seconds per phase within a step (``with timer("forward"): ...``); ``on_phase(name)`` is told when a
    phase begins (the progress bar shows it)."""

    def __init__(self, on_phase: Callable[[str], None] | None = None):
        self.seconds: dict[str, float] = defaultdict(float)
        self.on_phase = on_phase
        self.start = time.perf_counter()

    @contextmanager
    def __call__(self, name: str):
        if self.on_phase is not None:
            self.on_phase(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def elapsed(self) -> float:
        """Seconds since the timer was made (the step's wall time)."""
        return time.perf_counter() - self.start


def gold_of(pool, problem: dict[str, Any]) -> str:
    """The gold string ``pool`` grades ``problem`` against (with a choice grader's options), or the answer."""
    return pool.gold_for(problem) if hasattr(pool, "gold_for") else str(problem["answer"])


class TimedPool:
    """A grading pool whose ``grade`` calls are charged to the step's "grade" phase (not "generate")."""

    def __init__(self, pool, timer: Timer):
        self.pool, self.timer = pool, timer

    @property
    def grades_in_background(self) -> bool:
        return getattr(self.pool, "grades_in_background", False)

    def gold_for(self, problem):
        return self.pool.gold_for(problem)

    def submit(self, items):
        """Grade in the pool's background thread (overlapped with generation: charged to no phase)."""
        return self.pool.submit(items)

    def collect(self, futures):
        """The results of :meth:`submit` calls; the time spent waiting for them is the "grade" phase's."""
        return self._charged(lambda: [f.result() for f in futures])

    def grade(self, items):
        return self._charged(lambda: self.pool.grade(items))

    def _charged(self, fn):
        if self.timer.on_phase is not None:
            self.timer.on_phase("grade")
        start = time.perf_counter()
        try:
            return fn()
        finally:
            spent = time.perf_counter() - start
            self.timer.seconds["grade"] += spent
            self.timer.seconds["generate"] -= spent
            if self.timer.on_phase is not None:
                self.timer.on_phase("generate")


def rollout_metrics(groups, batch, rewards, adv_metrics, reduce, budget) -> dict[str, float]:
    """Global rollout statistics: all groups are on every rank; the batch-side ones are reduced."""
    import torch

    lengths = [len(ids) for g in groups for ids in g.response_ids]
    prompt_tokens = sum(len(g.prompt_ids) * len(g.response_ids) for g in groups)
    mask, n_groups = batch.response_mask, adv_metrics["num_groups"]
    local = torch.tensor([
        float(rewards.float().sum()), float(len(rewards)), float((batch.tok.old_entropy * mask).sum()),
        float(mask.sum()), adv_metrics["zero_variance_group_frac"] * n_groups, n_groups,
    ], dtype=torch.float64)  # fmt: skip
    s = reduce(local).tolist()
    return {
        "reward": s[0] / max(s[1], 1),
        "reward_base": sum(x for g in groups for x in g.rewards) / max(len(lengths), 1),
        "accuracy": sum(c for g in groups for c in g.correct) / max(len(lengths), 1),
        "response_len": sum(lengths) / max(len(lengths), 1),
        "response_len_max": float(max(lengths, default=0)),
        "truncated_frac": sum(f == "length" for g in groups for f in g.finish) / max(len(lengths), 1),
        "entropy": s[2] / max(s[3], 1),
        "zero_variance_group_frac": s[4] / max(s[5], 1),
        "tokens": float(sum(lengths) + prompt_tokens),
    }


def rank_mean(metrics: dict[str, float], reduce, world: int) -> dict[str, float]:
    """The mean over ranks of each metric (a key some rank lacks counts 0 there)."""
    import torch

    from ares_cli.training import distributed

    keys = distributed.broadcast_json(sorted(metrics))
    if not keys:
        return {}
    values = reduce(torch.tensor([float(metrics.get(k, 0.0)) for k in keys], dtype=torch.float64)) / world
    return dict(zip(keys, values.tolist(), strict=True))


def timing_metrics(timer: Timer, seconds: float, tokens: float) -> dict[str, float]:
    """Seconds per phase and of the whole step, and the step's throughput."""
    return {**{f"time/{p}": round(timer.seconds[p], 4) for p in PHASES}, "time/step": round(seconds, 4),
            "tokens_per_s": tokens / max(seconds, 1e-9)}  # fmt: skip


def add_to_counters(counters: dict[str, Any], tokens: float, timer: Timer) -> None:
    """The run's running totals (checkpointed): tokens, and seconds per phase."""
    counters["tokens"] += int(tokens)
    for p in PHASES:
        counters[f"{p}_s"] += timer.seconds[p]


class ETA:
    """Time left, from the mean time of the steps this process has run so far."""

    def __init__(self, start: int, stop: int):
        self.start, self.stop, self.t0 = start, stop, time.time()

    def after(self, step: int) -> float:
        """Seconds left once 0-based ``step`` is done."""
        return (time.time() - self.t0) / (step + 1 - self.start) * (self.stop - step - 1)


def log_line(row: dict[str, Any], total: int, eta: float) -> str:
    eta_s = int(max(eta, 0))
    kl = row.get("kl_k3", row.get("kl_k1", row.get("kl_k2", row.get("approx_kl_k3", 0.0))))
    return (
        f"step {row['step']}/{total} | reward {row['reward']:.3f} | acc {row['accuracy']:.3f} | "
        f"len {row['response_len']:.0f} | ent {row['entropy']:.3f} | kl {kl:.2e} | "
        f"clip {row.get('clipfrac_low', 0):.3f}/{row.get('clipfrac_high', 0):.3f} | "
        f"loss {row.get('loss', 0):.4f} | tok/s {row['tokens_per_s']:,.0f} | "
        f"gen {row['time/generate']:.1f}s grade {row['time/grade']:.1f}s fwd {row['time/forward']:.1f}s "
        f"bwd {row['time/backward']:.1f}s | eta {eta_s // 3600}:{eta_s % 3600 // 60:02d}:{eta_s % 60:02d}"
    )
