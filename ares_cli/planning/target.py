"""The machine a run is planned for, and the verdict of an estimate on it (pure data)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ares_cli.planning.memory import GIB, Term, total
from ares_cli.store.values import At, byte_size

DEFAULT_GPU_MEMORY = 80 * GIB


def parse_bytes(text: str, option: str = "--gpu-memory") -> int:
    """``80GiB`` / ``80GB`` / ``24 GiB`` / ``1.5e10`` -> bytes (:func:`ares_cli.store.values.byte_size`: a
    UsageError naming ``option`` for anything else, an overflowing or non-finite size included)."""
    return byte_size(text, At.opt(option))


@dataclass(frozen=True)
class Target:
    """``gpus_per_node`` x ``nodes`` GPUs of ``gpu_memory`` bytes; ``throughput`` tokens/s per GPU if known."""

    gpus_per_node: int = 1
    nodes: int = 1
    gpu_memory: int = DEFAULT_GPU_MEMORY
    memory_source: str = "assumed (no --gpu-memory)"
    throughput: float | None = None
    throughput_source: str = ""

    @property
    def world(self) -> int:
        return self.gpus_per_node * self.nodes

    def describe(self) -> str:
        return f"{self.nodes} node(s) x {self.gpus_per_node} GPU(s) of {self.gpu_memory / GIB:.1f} GiB"


@dataclass
class Estimate:
    """Per-GPU memory of a stage: the trainer's (or generator's) terms against its budget, and the rollout
    engine's share when one runs beside it (vLLM), each with the reasons it does not fit."""

    terms: list[Term]
    budget: int
    budget_how: str
    engine_terms: list[Term] = field(default_factory=list)
    engine_budget: int = 0
    engine_need: int = 0  # the least the engine needs to start
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tokens_per_step: int | None = None
    tokens_how: str = ""
    seconds_per_step: float | None = None

    @property
    def need(self) -> int:
        return total(self.terms)

    @property
    def fits(self) -> bool:
        return not self.reasons

    @property
    def engine_fits(self) -> bool:
        return not self.engine_terms or self.engine_need <= self.engine_budget

    @property
    def shortfall(self) -> int:
        """Bytes missing on the tighter side (trainer or engine); <= 0 when both fit."""
        engine = self.engine_need - self.engine_budget if self.engine_terms else -(1 << 62)
        return max(self.need - self.budget, engine)

    def to_json(self) -> dict:
        out = {
            "fits": self.fits, "need_bytes": self.need, "need_gib": round(self.need / GIB, 2),
            "budget_bytes": self.budget, "budget_gib": round(self.budget / GIB, 2), "budget_how": self.budget_how,
            "terms": [t.to_json() for t in self.terms], "reasons": self.reasons, "notes": self.notes,
            "tokens_per_step": self.tokens_per_step, "tokens_how": self.tokens_how,
            "seconds_per_step": None if self.seconds_per_step is None else round(self.seconds_per_step, 2),
        }  # fmt: skip
        if self.engine_terms:
            out["engine"] = {"terms": [t.to_json() for t in self.engine_terms], "budget_bytes": self.engine_budget,
                             "need_bytes": self.engine_need}  # fmt: skip
        return out


def check_budget(estimate: Estimate, what: str) -> None:
    """Add the reason when the terms exceed the budget."""
    if estimate.need > estimate.budget:
        estimate.reasons.append(
            f"{what} needs {estimate.need / GIB:.1f} GiB per GPU but has {estimate.budget / GIB:.1f} GiB "
            f"({estimate.budget_how}); largest terms: {_largest(estimate.terms)}"
        )


def _largest(terms: list[Term], n: int = 3) -> str:
    top = sorted(terms, key=lambda t: -t.bytes)[:n]
    return ", ".join(f"{t.name} {t.bytes / GIB:.1f} GiB" for t in top)
