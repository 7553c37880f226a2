"""The smallest changes that make a run fit, each with its new estimate (pure).

Candidates come in families, in a fixed order, cheapest in lost speed first (for RL: the fused head,
gradient checkpointing, a lower ``vllm_gpu_memory_utilization``, a token budget per micro-batch, a smaller
micro-batch, a higher ZeRO stage then optimizer offload, more GPUs), each family from its mildest member to its
strongest. The report gives each family's mildest member that fits alone, with its new estimate; when none
does, one combination, built family by family from the members that shrink the shortfall most.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ares_cli.planning.memory import GIB
from ares_cli.planning.target import Estimate, Target

# ZeRO settings of pipelines/deepspeed/zero{2,3}.json (what a suggestion to use them means)
ZERO_FILES = {
    2: {"stage": 2, "bf16": True, "reduce_bucket_size": 200_000_000, "allgather_bucket_size": 200_000_000,
        "overlap_comm": False, "prefetch_bucket_size": 50_000_000, "max_live_parameters": 1_000_000_000,
        "offload_optimizer": "none", "offload_param": "none"},
    3: {"stage": 3, "bf16": True, "reduce_bucket_size": 200_000_000, "allgather_bucket_size": 500_000_000,
        "overlap_comm": False, "prefetch_bucket_size": 50_000_000, "max_live_parameters": 1_000_000_000,
        "offload_optimizer": "none", "offload_param": "none"},
}  # fmt: skip
# ... and of pipelines/deepspeed/zero{2,3}_offload.json: the same with the optimizer in host memory
OFFLOAD_FILES = {stage: {**zero, "offload_optimizer": "cpu"} for stage, zero in ZERO_FILES.items()}
HOST_BUFFER_FACTOR = 1.5  # DeepSpeed's estimators' additional_buffer_factor


@dataclass(frozen=True)
class Change:
    """One candidate: how to apply it (``flag``), the config keys it sets, the ZeRO settings or GPUs, and
    what else it asks of the machine (``note``)."""

    flag: str
    sets: tuple[tuple[str, Any], ...] = ()
    zero: dict | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    note: str = ""


@dataclass
class Suggestion:
    changes: list[Change]
    estimate: Estimate

    def to_json(self) -> dict:
        out = {"change": " ".join(c.flag for c in self.changes), "fits": self.estimate.fits,
               "need_gib": round(self.estimate.need / GIB, 2), "budget_gib": round(self.estimate.budget / GIB, 2),
               "reasons": self.estimate.reasons}  # fmt: skip
        notes = [c.note for c in self.changes if c.note]
        if notes:
            out["notes"] = notes
        return out


def zero_family(zero: dict | None, target: Target, params: int, *, key: str | None = None) -> list[Change]:
    """The DeepSpeed files, mildest first: a higher ZeRO stage than the one in use (``zero{2,3}.json``), then
    optimizer offload, one family since a run takes one file (:func:`offload_changes`). ``key``: the config
    key the file goes in (``optim.deepspeed`` for RL), set with it."""
    stage = zero["stage"] if zero else None
    family = []
    for s in (2, 3):
        if stage is None or s > stage:
            path = f"pipelines/deepspeed/zero{s}.json"
            family.append(Change(f"--deepspeed {path}", ((key, path),) if key else (), zero=ZERO_FILES[s]))
    return family + offload_changes(zero, target, params, key=key)


def offload_changes(
    zero: dict | None, target: Target, params: int, *, key: str | None = None
) -> list[Change]:
    """Optimizer offload (ZeRO-Offload): ZeRO-2, then ZeRO-3, with the fp32 master weights, AdamW moments and
    fp32 gradients in host memory (no lower stage than the one in use; none where the optimizer is offloaded
    already). Each names the shipped ``zero{2,3}_offload.json`` and, in its note, the host memory per node
    DeepSpeed's estimators give for ``params`` parameters (``estimate_zero2_model_states_mem_needs``:
    P x max(4 x GPUs, 16) x 1.5; ``estimate_zero3_model_states_mem_needs`` with zero.Init: P x 16 / nodes
    x 1.5), which the plan does not check."""
    if zero is not None and zero["offload_optimizer"] != "none":
        return []
    changes = []
    for stage in (s for s in (2, 3) if zero is None or s >= zero["stage"]):
        path = f"pipelines/deepspeed/zero{stage}_offload.json"
        per_param = max(4 * target.world, 16) if stage == 2 else 16 / target.nodes
        host = params * per_param * HOST_BUFFER_FACTOR
        note = (f"needs ~{host / GIB:.1f} GiB of host memory per node for the offloaded optimizer (DeepSpeed's "
                f"estimate; not checked), and steps slower: AdamW runs on the CPU")  # fmt: skip
        changes.append(Change(f"--deepspeed {path}", ((key, path),) if key else (), zero=OFFLOAD_FILES[stage],
                              note=note))  # fmt: skip
    return changes


def with_sets(cfg, sets: tuple[tuple[str, Any], ...]):
    """``cfg`` with dotted keys replaced (``("optim.micro_batch_size", 2)``), nested dataclasses copied."""
    for key, value in sets:
        cfg = _replace(cfg, key.split("."), value)
    return cfg


def _replace(obj, parts: list[str], value):
    if len(parts) == 1:
        return dataclasses.replace(obj, **{parts[0]: value})
    return dataclasses.replace(obj, **{parts[0]: _replace(getattr(obj, parts[0]), parts[1:], value)})


Estimator = Callable[[Any, dict | None, Target], Estimate]


def suggestions(cfg, zero: dict | None, target: Target, families: list[list[Change]],
                estimator: Estimator) -> list[Suggestion]:  # fmt: skip
    """Per family of changes (ordered from mildest to strongest), its mildest member that fits alone; when
    no family fits alone, one combination built family by family, each adding the member that leaves the
    least shortfall (trainer or engine side; never one that leaves the engine unable to start) when it
    helps, until the run fits (or all families are
    used, still not fitting: the run needs more than these changes)."""

    def apply(changes: list[Change]) -> Estimate:
        c, z, t = cfg, zero, target
        for ch in changes:
            c = with_sets(c, ch.sets)
            z = ch.zero if ch.zero is not None else z
            t = dataclasses.replace(
                t, gpus_per_node=ch.gpus_per_node or t.gpus_per_node, nodes=ch.nodes or t.nodes
            )
        return estimator(c, z, t)

    fitting = []
    for family in families:
        for change in family:
            est = apply([change])
            if est.fits:
                fitting.append(Suggestion([change], est))
                break
    if fitting:
        return fitting
    chosen, best = [], estimator(cfg, zero, target)
    for family in families:  # greedily: each family's member that leaves the least shortfall, if it helps
        trials = [(apply([*chosen, change]), change) for change in family]
        trials = [t for t in trials if t[0].engine_fits or not best.engine_fits]  # never starve the engine
        if not trials:
            continue
        est, change = min(trials, key=lambda t: t[0].shortfall)
        if est.shortfall < best.shortfall:
            chosen, best = [*chosen, change], est
        if best.fits:
            break
    return [Suggestion(chosen, best)] if chosen else []
