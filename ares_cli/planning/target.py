"""The machine a run is planned for and the verdict of an estimate on it.

:class:`Target` and :class:`Estimate` are pure data; :func:`make_target` builds the target from the command
line (``--gpus``, ``--nodes``, ``--gpu-memory``, ``--throughput``), reading this machine's GPU or an rl/sft
artifact's measured throughput when asked to.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ares_cli.errors import InputError, UsageError
from ares_cli.planning.memory import GIB, Term, total
from ares_cli.store.untrusted import load_json_bounded, parse_json_bounded, read_bounded
from ares_cli.store.values import At, byte_size, count, looks_numeric, mapping, number, number_text

DEFAULT_GPU_MEMORY = 80 * GIB
MAX_TOKENS_PER_S = 1e9  # per GPU: a thousand times what any GPU trains or samples
MAX_WORLD_SIZE = 1 << 20  # ranks of one run
MAX_METRICS_BYTES = 256 * 1024 * 1024  # a million steps of metrics rows


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
    unchecked: list[str] = field(default_factory=list)  # what the estimate left out, said in the verdict
    phases: dict[str, list[Term]] = field(
        default_factory=dict
    )  # every phase's own terms (the peak's are in terms)

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
            "unchecked": self.unchecked,
        }  # fmt: skip
        if self.phases:
            out["phases"] = {k: [t.to_json() for t in v] for k, v in self.phases.items()}
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


# The target from the command line: this machine's GPU, or an artifact's measured throughput (I/O).
def make_target(opts, *, gpus: int, nodes: int, gpu_memory: str | None, throughput: str | None) -> Target:
    """``--gpus``/``--nodes``/``--gpu-memory``/``--throughput`` as a :class:`Target`.

    Without ``--gpu-memory``: this machine's first CUDA GPU if it has one, else 80 GiB (said in the report).
    ``--throughput`` is tokens/s per GPU, or an rl/sft artifact: the median ``tokens_per_s`` of its
    ``metrics.jsonl`` over its ranks."""
    if gpu_memory is not None:
        memory, source = parse_bytes(gpu_memory), "--gpu-memory"
    else:
        memory, source = _local_gpu_memory()
    rate, rate_source = (None, "") if throughput is None else _throughput(opts, throughput)
    return Target(gpus_per_node=gpus, nodes=nodes, gpu_memory=memory, memory_source=source, throughput=rate,
                  throughput_source=rate_source)  # fmt: skip


def _local_gpu_memory() -> tuple[int, str]:
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return int(props.total_memory), f"this machine's {props.name}"
    return DEFAULT_GPU_MEMORY, f"assumed {DEFAULT_GPU_MEMORY // GIB} GiB (no --gpu-memory, no local GPU)"


def _throughput(opts, text: str) -> tuple[float, str]:
    """A number of tokens/s per GPU, or an artifact's measured rate (a number-like text that is not a
    directory is a number: ``inf``, ``nan``, ``1e400`` and ``-5`` are refused, never taken as a path)."""
    if not text.strip():
        raise UsageError("--throughput: expected tokens/s per GPU or an rl/sft artifact, got an empty value")
    if looks_numeric(text) and not Path(text).exists():
        return number_text(
            text, At.opt("--throughput (tokens/s per GPU)"), maximum=MAX_TOKENS_PER_S
        ), "--throughput"
    return measured_throughput(opts.artifacts_root, text)


def measured_throughput(root: Path, ref: str) -> tuple[float, str]:
    """Median tokens/s per GPU of an rl or sft artifact's steps (complete or partial).

    Every row of its ``metrics.jsonl`` must be a JSON object; a ``tokens_per_s`` a finite number >= 0 (a
    step with no tokens logs 0 and is left out); the manifest's ``stats.world_size`` a positive integer
    (1 when the manifest or the key is absent: a partial run). Anything else is an InputError naming the
    file, row and field."""
    from ares_cli.store.artifacts import ArtifactStore

    try:
        directory = Path(ref) if Path(ref).is_dir() else ArtifactStore(root).resolve(ref)
    except InputError as err:
        raise InputError(f"--throughput: {ref!r} is neither a number of tokens/s per GPU nor an rl/sft "
                         f"artifact ({err})") from None  # fmt: skip
    metrics = directory / "metrics.jsonl"
    if not os.path.lexists(metrics):
        raise InputError("--throughput: no metrics.jsonl (expected an rl or sft artifact)", file=directory)
    data = read_bounded(metrics, max_bytes=MAX_METRICS_BYTES, what="--throughput: metrics")
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise InputError("--throughput: metrics are not UTF-8 text", file=metrics) from None
    rates = []
    for n, line in enumerate(lines, 1):
        try:
            row = parse_json_bounded(line, source=metrics, what="--throughput: metrics row")
        except InputError as err:
            if n == len(lines):  # a killed run's torn last write
                continue
            raise InputError(str(err).split(": ", 1)[-1], file=metrics, row=n) from None
        at = At.in_file(metrics, row=n, what="--throughput")
        mapping(row, at)
        if "tokens_per_s" in row:
            rate = number(
                row["tokens_per_s"], at.child("tokens_per_s"), inclusive=True, maximum=MAX_TOKENS_PER_S
            )
            if rate > 0:
                rates.append(rate)
    if not rates:
        raise InputError("--throughput: no step with tokens_per_s", file=metrics)
    return statistics.median(rates) / _world_size(
        directory
    ), f"measured: median of {len(rates)} steps of {directory.name}"


def _world_size(directory: Path) -> int:
    """The ranks an artifact's run used: its manifest's ``stats.world_size`` (1 without a manifest)."""
    manifest = directory / "manifest.json"
    if not os.path.lexists(manifest):
        return 1
    at = At.in_file(manifest, what="--throughput")
    stats = mapping(mapping(load_json_bounded(manifest, what="--throughput: manifest"), at).get("stats", {}),
                    at.child("stats"))  # fmt: skip
    if "world_size" not in stats:
        return 1
    return count(stats["world_size"], at.child("stats").child("world_size"), maximum=MAX_WORLD_SIZE)
