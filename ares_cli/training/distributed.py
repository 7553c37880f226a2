"""Distributed glue: process-group setup from launcher environment variables, and the DeepSpeed engine.

``torchrun`` and the ``deepspeed`` launcher both set RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR /
MASTER_PORT; :func:`init_from_env` reads them (gloo on CPU; on GPU nccl for CUDA tensors, gloo for CPU
ones) and is a no-op for one process.
Gradient reduction is a *sum* here: every loss is already normalised by the global token count of the
optimiser step, so summing rank gradients gives the single-process gradient whatever the split.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError, UsageError


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: global rank, world size, local rank and its torch device string."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_from_env(*, cpu: bool | None = None) -> DistInfo:
    """Initialise ``torch.distributed`` from launcher variables (once); one process when WORLD_SIZE is unset."""
    import torch
    import torch.distributed as dist

    world = launched_ranks()
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if cpu is None else not cpu
    device = f"cuda:{local_rank}" if use_cuda else "cpu"
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if world > 1 and not dist.is_initialized():
        for var in ("MASTER_ADDR", "MASTER_PORT"):
            if var not in os.environ:
                raise UsageError(
                    f"WORLD_SIZE={world} but {var} is not set; launch with torchrun or deepspeed"
                )
        # CPU tensors (metric sums, JSON payloads) go through gloo even when CUDA tensors use NCCL
        backend = "cpu:gloo,cuda:nccl" if use_cuda else "gloo"
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
        # A process group still alive at interpreter exit aborts the process from the backend's
        # destructor ("terminate called without an active exception"), turning a finished rank into a
        # SIGABRT; tear it down on every exit path, including errors and early stops.
        atexit.register(shutdown)
    return DistInfo(rank=rank, world_size=world, local_rank=local_rank, device=device)


def is_initialized() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def is_main() -> bool:
    """True on global rank 0 (and in a single process)."""
    import torch.distributed as dist

    return not is_initialized() or dist.get_rank() == 0


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    import torch.distributed as dist

    if is_initialized():
        dist.barrier()


def all_reduce_sum(tensor):
    """Sum ``tensor`` over ranks in place and return it (identity in a single process)."""
    import torch.distributed as dist

    if is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_json(value: Any = None, *, src: int = 0) -> Any:
    """Rank ``src``'s JSON-serialisable ``value`` on every rank (sent as UTF-8 bytes, never pickled)."""
    import torch
    import torch.distributed as dist

    if not is_initialized():
        return value
    payload = json.dumps(value).encode() if dist.get_rank() == src else b""
    size = torch.tensor([len(payload)], dtype=torch.long)
    dist.broadcast(size, src=src)
    buffer = torch.zeros(int(size.item()), dtype=torch.uint8)
    if dist.get_rank() == src:
        buffer.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    dist.broadcast(buffer, src=src)
    return json.loads(buffer.numpy().tobytes())


def all_gather_json(value: Any) -> list[Any]:
    """Every rank's JSON-serialisable ``value``, in rank order: two collectives, whatever the world size."""
    import torch
    import torch.distributed as dist

    if not is_initialized():
        return [value]
    payload = json.dumps(value).encode()
    world = dist.get_world_size()
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(payload)], dtype=torch.long))
    width = max(int(s.item()) for s in sizes)
    mine = torch.zeros(width, dtype=torch.uint8)
    if payload:
        mine[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    buffers = [torch.empty(width, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(buffers, mine)
    return [json.loads(b[: int(n.item())].numpy().tobytes()) for b, n in zip(buffers, sizes, strict=True)]


def all_reduce_grads_sum(parameters) -> None:
    """Sum the gradients of ``parameters`` over ranks (plain-torch data parallelism without DDP)."""
    if not is_initialized():
        return
    for param in parameters:
        if param.grad is not None:
            all_reduce_sum(param.grad)


def shutdown() -> None:
    """Destroy the process group (no-op when there is none)."""
    import torch.distributed as dist

    if is_initialized():
        dist.destroy_process_group()


def rank_share(total: int, rank: int, world: int) -> int:
    """Rank ``rank``'s part of ``total`` split over ``world`` ranks (the first ``total % world`` ranks take one
    more), at least 1: a run's grading workers, so 8 ranks of a 16-worker recipe start 16, not 128."""
    return max(1, total // world + (rank < total % world))


def launched_ranks() -> int:
    """WORLD_SIZE as set by torchrun / deepspeed (1 when not launched by one)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def leave_process(code: int) -> None:
    """End a launcher-started rank: flush stdio, destroy the process group, then ``os._exit(code)``.

    Interpreter teardown in a rank whose communication objects are still referenced (DeepSpeed keeps its
    groups and engine alive in module globals) intermittently aborts with "terminate called without an
    active exception" after all work is done, turning a finished rank into SIGABRT and failing the launch.
    Every context manager (artifact locks, grading pools) has closed by now; skipping teardown makes the
    exit status the run's own.
    """
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    shutdown()
    os._exit(code)


# ---- DeepSpeed ---------------------------------------------------------------------------------------
def deepspeed_config(
    path: str | Path, *, micro_batch: int, grad_accum: int, world_size: int, grad_clip: float, bf16: bool
) -> dict[str, Any]:
    """Read a ZeRO JSON/YAML config and fill the batch, clipping and precision keys from the SFT config.

    Keys the file sets to ``"auto"`` (or leaves out) are filled; an explicit value that contradicts the SFT
    config is a usage error, so the run never trains with a batch other than the one in its manifest.
    """
    from ares_cli.training.deepspeed_file import read_deepspeed_file

    path = Path(path)
    config = read_deepspeed_file(path)
    wanted = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": grad_accum,
        "train_batch_size": micro_batch * grad_accum * world_size,
        "gradient_clipping": grad_clip,
    }
    for key, value in wanted.items():
        if config.get(key, "auto") not in ("auto", value):
            raise UsageError(f'{path}: {key}={config[key]} contradicts the SFT config ({value}); use "auto"')
        config[key] = value
    config["bf16"] = {**config.get("bf16", {}), "enabled": bf16}
    config["fp16"] = {"enabled": False}
    config.setdefault("steps_per_print", 10**9)
    config.setdefault("wall_clock_breakdown", False)
    return config


def check_deepspeed_config(config: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """Validate a filled config (:func:`deepspeed_config`) with DeepSpeed's own parser, before any work;
    returns the ZeRO settings the memory estimate needs. A key DeepSpeed rejects is an InputError naming
    the file. The batch keys are checked for one rank here (DeepSpeed reads the world size from the
    process group); :func:`deepspeed_config` has already checked them against the planned ranks."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu" if not _cuda() else "cuda")
    from deepspeed.runtime.config import DeepSpeedConfig

    one_rank = dict(config)
    one_rank["train_batch_size"] = (
        config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"]
    )
    try:
        parsed = DeepSpeedConfig(one_rank)
    except Exception as err:  # pydantic ValidationError, AssertionError, ValueError: DeepSpeed's own words
        first = str(err).strip().splitlines()
        raise InputError(f"DeepSpeed rejects the config: {' '.join(first[:3])}", file=path) from None
    from ares_cli.training.deepspeed_file import runnable_with_ares

    runnable_with_ares(config, parsed, path)  # accepted by DeepSpeed's parser, yet fails with ares's AdamW
    zero = parsed.zero_config

    def device(offload) -> str:
        return "none" if offload is None else str(getattr(offload.device, "value", offload.device))

    return {
        "stage": int(parsed.zero_optimization_stage),
        "bf16": bool(parsed.bfloat16_config.enabled),
        "reduce_bucket_size": int(zero.reduce_bucket_size),
        "allgather_bucket_size": int(zero.allgather_bucket_size),
        "overlap_comm": bool(zero.overlap_comm),
        "prefetch_bucket_size": int(zero.prefetch_bucket_size),
        "max_live_parameters": int(zero.max_live_parameters),
        "offload_optimizer": device(zero.offload_optimizer),
        "offload_param": device(zero.offload_param),
    }


def deepspeed_engine(model, optimizer, config: dict[str, Any]):
    """Wrap ``model`` and a client torch optimizer in a DeepSpeed engine (process group already set up)."""
    with deepspeed_ready():
        import deepspeed

        engine, _, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, config=config, dist_init_required=not is_initialized()
        )
    return engine


@contextlib.contextmanager
def deepspeed_ready():
    """What every call into DeepSpeed runs inside: its accelerator named, a group of one formed for a process
    started without a launcher (torn down at exit), stdout kept for the stage's result (DeepSpeed prints its
    op builds there, "... built successfully") and its comm backend formed without the inference-only op."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu" if not _cuda() else "cuda")
    if not is_initialized() and launched_ranks() == 1:
        _single_process_group()
        atexit.register(shutdown)  # the group DeepSpeed uses must not outlive the interpreter (see above)
    import sys

    from ares_cli.training.deepspeed_ops import without_inference_shm_op

    with contextlib.redirect_stdout(sys.stderr), without_inference_shm_op():
        yield


def _single_process_group() -> None:
    """A group of one for a process started without torchrun/deepspeed, formed in memory (a ``HashStore``):
    no port is chosen, so no other process can hold it first (a TCP store's port, however chosen, could be
    taken between choosing and listening: EADDRINUSE under parallel tests). DeepSpeed then uses this group
    instead of discovering an MPI world (which fails without mpi4py); the launcher variables it reads for
    the rank are set, MASTER_ADDR/MASTER_PORT are not needed."""
    import torch.distributed as dist

    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    backend = "cpu:gloo,cuda:nccl" if _cuda() else "gloo"
    dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)


def zero_stage(engine) -> int:
    return int(engine.zero_optimization_stage()) if engine is not None else 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def open_stage_on_main(store, dist_state, stage: str, **kwargs) -> tuple[Any, dict[str, Any]]:
    """Rank 0 opens (or finds up to date) the stage's artifact; every rank gets its directories.

    Returns (StageRun on rank 0 else None, {"up_to_date", "work_dir", "final", "resumed"}); a failure on
    rank 0 is raised there and reported on the other ranks with the same exit code.
    """
    from ares_cli.errors import AresError, StageFailure

    run, info = None, None
    if dist_state.is_main:
        try:
            run = store.open_stage(stage, **kwargs)
            info = {"up_to_date": run.up_to_date, "work_dir": str(run.work_dir), "final": str(run.final_dir),
                    "resumed": run.resumed}  # fmt: skip
        except AresError as err:
            broadcast_json({"error": str(err), "exit_code": err.exit_code})
            raise
    info = broadcast_json(info)
    if "error" in info:
        failure = StageFailure(f"rank 0 could not open the artifact: {info['error']}")
        failure.exit_code = info.get("exit_code", failure.exit_code)  # e.g. 75 when the stage is locked
        raise failure
    return run, info


def all_gather_1d(tensor):
    """Every rank's 1-D float ``tensor``, concatenated in rank order (any lengths; identity in one process).

    Values travel as JSON floats (exact round trip for float64), through :func:`all_gather_json`."""
    import torch

    if not is_initialized():
        return tensor
    parts = all_gather_json(tensor.detach().to(torch.float64).cpu().tolist())
    return torch.tensor([x for p in parts for x in p], dtype=tensor.dtype, device=tensor.device)
