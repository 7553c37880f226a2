"""The planned machine from the command line: GPU count and memory, and a measured throughput (I/O)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ares_cli.errors import InputError, UsageError
from ares_cli.planning.memory import GIB
from ares_cli.planning.target import DEFAULT_GPU_MEMORY, Target, parse_bytes


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
    try:
        value = float(text)
    except ValueError:
        return measured_throughput(opts.artifacts_root, text)
    if not value > 0:
        raise UsageError(f"--throughput must be > 0 tokens/s per GPU, got {text}")
    return value, "--throughput"


def measured_throughput(root: Path, ref: str) -> tuple[float, str]:
    """Median tokens/s per GPU of an rl or sft artifact's steps (complete or partial)."""
    from ares_cli.store.artifacts import ArtifactStore

    store = ArtifactStore(root)
    directory = Path(ref) if Path(ref).is_dir() else store.resolve(ref)
    metrics = directory / "metrics.jsonl"
    if not metrics.is_file():
        raise InputError("--throughput: no metrics.jsonl (expected an rl or sft artifact)", file=directory)
    rates = []
    lines = metrics.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except ValueError:
            if n == len(lines):  # a killed run's torn last write
                continue
            raise InputError("--throughput: not a JSON row", file=metrics, row=n) from None
        if (
            isinstance(row, dict)
            and isinstance(row.get("tokens_per_s"), (int, float))
            and row["tokens_per_s"] > 0
        ):
            rates.append(float(row["tokens_per_s"]))
    if not rates:
        raise InputError("--throughput: no step with tokens_per_s", file=metrics)
    world = 1
    manifest = directory / "manifest.json"
    if manifest.is_file():
        world = int(json.loads(manifest.read_text(encoding="utf-8")).get("stats", {}).get("world_size") or 1)
    return statistics.median(rates) / world, f"measured: median of {len(rates)} steps of {directory.name}"
