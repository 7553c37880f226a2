"""Training checkpoints without pickle: tensors in safetensors, everything else in JSON.

A checkpoint is a directory ``checkpoints/step-000012/`` holding

- ``model.safetensors``                 the trainable model's full state dict (written by rank 0),
- ``optimizer.rank{r}.safetensors/.json`` each rank's optimizer state (a full torch AdamW state, or the
  rank's ZeRO-1/2/3 partition of it), nested structure in JSON with tensors referenced by key,
- ``rng.rank{r}.safetensors/.json``     python / numpy / torch RNG states,
- ``files.rank{r}.json``                 sha256 and size of every file rank r wrote (fsynced first),
- ``state.json``                        step, epoch, counters, world size (written last: the marker).

The schedule is a pure function of the step, so "scheduler state" is the step. Directories are written as
``*.tmp`` and renamed once every rank's files are complete; :func:`prune` then keeps that checkpoint and the
one before it; :func:`latest` returns the newest checkpoint whose files all match their sha256, so a
checkpoint truncated or damaged on disk sends the run back to the previous one instead of stranding it.
:func:`model_state` gathers the full weights (collectively under ZeRO-3); :func:`optimizer_state` /
:func:`load_optimizer` take a torch or DeepSpeed ZeRO-1/2/3 optimizer state out and back in; :func:`save_final` writes the trained model (``save_pretrained``) and drops the checkpoints. SFT and
RL share them.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ares_cli.training.sealing import STATE, checkpoint_problems, fsync_dir, problems_in, seal, write_synced

KEEP = 2  # checkpoints kept on disk: the newest and the one before it
_STEP_DIR = re.compile(r"step-\d{6}")


# ---- nested state <-> (tensors, json) --------------------------------------------------------------
def flatten_state(obj: Any, tensors: dict[str, Any], prefix: str = "t") -> Any:
    """Replace every tensor in a nested dict/list by ``{"__tensor__": key}``, collecting it in ``tensors``."""
    import torch

    if isinstance(obj, torch.Tensor):
        key = f"{prefix}.{len(tensors)}"
        tensors[key] = obj.detach().cpu().contiguous()
        return {"__tensor__": key}
    if isinstance(obj, dict):
        return {"__dict__": [[k, flatten_state(v, tensors, prefix)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return [flatten_state(v, tensors, prefix) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot checkpoint a {type(obj).__name__} without pickle")


def unflatten_state(obj: Any, tensors: dict[str, Any]) -> Any:
    if isinstance(obj, dict) and "__tensor__" in obj:
        return tensors[obj["__tensor__"]]
    if isinstance(obj, dict) and "__dict__" in obj:
        return {k: unflatten_state(v, tensors) for k, v in obj["__dict__"]}
    if isinstance(obj, list):
        return [unflatten_state(v, tensors) for v in obj]
    return obj


@contextmanager
def disk_errors(path: Path):
    """Re-raise safetensors' I/O failures ("... (os error 28) ...") as the OSError they are, naming ``path``.

    So a full or read-only disk under a checkpoint or the final model is reported like any other write.
    """
    try:
        yield
    except OSError:
        raise
    except Exception as err:
        match = re.search(r"\(os error (\d+)\)", str(err))
        if match is None:
            raise
        code = int(match.group(1))
        raise OSError(code, os.strerror(code), str(path)) from err


def save_state(obj: Any, stem: Path) -> None:
    """``stem.safetensors`` + ``stem.json`` for a nested state (dict keys may be ints: kept as ints)."""
    from safetensors.torch import save_file

    tensors: dict[str, Any] = {}
    tree = flatten_state(obj, tensors)
    with disk_errors(_path(stem, ".safetensors")):
        save_file(tensors, str(_path(stem, ".safetensors")))
    _path(stem, ".json").write_text(json.dumps(tree))


def _path(stem: Path, suffix: str) -> Path:
    return stem.with_name(stem.name + suffix)  # not with_suffix: "optimizer.rank1" has a dot


def load_state(stem: Path) -> Any:
    from safetensors.torch import load_file

    tensors = load_file(str(_path(stem, ".safetensors")))
    return unflatten_state(json.loads(_path(stem, ".json").read_text()), tensors)


# ---- RNG -------------------------------------------------------------------------------------------
def rng_state() -> dict[str, Any]:
    import numpy as np
    import torch

    version, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": _listify(random.getstate()),
        "torch": torch.get_rng_state(),
        "numpy": [version, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(gauss)],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    version, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((version, keys.numpy().astype("uint32"), pos, has_gauss, gauss))
    random.setstate(_tuplify(state["python"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _listify(value):
    return [_listify(v) for v in value] if isinstance(value, (tuple, list)) else value


def _tuplify(value):
    return tuple(_tuplify(v) for v in value) if isinstance(value, list) else value


# ---- checkpoint directories ----------------------------------------------------------------------
def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:06d}"


def save(
    root: Path,
    step: int,
    *,
    model_state: dict | None,
    optimizer_state: Any,
    meta: dict[str, Any],
    rank: int,
    barrier=lambda: None,
) -> Path:
    """Write one checkpoint collectively: every rank its optimizer + RNG, rank 0 the model and the marker.

    Each rank fsyncs and hashes what it wrote into ``files.rank{r}.json``; rank 0 checks every rank's files
    are there at their recorded sizes, writes ``state.json`` last, renames the directory into place and
    only then prunes, keeping the previous checkpoint as well (:data:`KEEP`).
    """
    final = step_dir(root, step)
    tmp = final.with_name(final.name + ".tmp")
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
    written = []
    if rank == 0 and model_state is not None:
        from safetensors.torch import save_file

        tensors, aliases = dedupe_tied(model_state)
        with disk_errors(tmp / "model.safetensors"):
            save_file(tensors, str(tmp / "model.safetensors"))
        (tmp / "model.aliases.json").write_text(json.dumps(aliases, sort_keys=True))
        written += ["model.safetensors", "model.aliases.json"]
    save_state(optimizer_state, tmp / f"optimizer.rank{rank}")
    save_state(rng_state(), tmp / f"rng.rank{rank}")
    written += [
        f"{stem}.rank{rank}{suffix}" for stem in ("optimizer", "rng") for suffix in (".safetensors", ".json")
    ]
    sealed = seal(tmp, rank, written)
    barrier()
    if rank == 0:
        problems = problems_in(tmp, meta.get("world_size", 1), rehash=False)
        if problems:
            from ares_cli.errors import StageFailure

            raise StageFailure(f"checkpoint {tmp} is incomplete: {'; '.join(problems)}")
        write_synced(tmp / STATE, json.dumps(meta, indent=2, sort_keys=True))
        seal(tmp, 0, [STATE], sealed)  # the step and counters are covered by a hash too
        fsync_dir(tmp)
        if final.exists():  # a damaged checkpoint of this step, left by an earlier run
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_dir(root)
        prune(root, keep=final)
    barrier()
    return final


def _complete_steps(root: Path) -> list[Path]:
    """Checkpoint directories that were renamed into place (``step-NNNNNN``), oldest first."""
    return sorted(p for p in root.glob("step-*") if p.is_dir() and _STEP_DIR.fullmatch(p.name))


def latest(root: Path, log: Callable[[str], None] | None = None) -> Path | None:
    """The newest checkpoint under ``root`` whose files all verify, or None; a damaged newer one is skipped.

    Every rank calls it; rank 0 alone re-hashes the files (every rank's) and the others take its answer
    (one broadcast), so all ranks pick the same checkpoint and each file is read once, not once per rank.
    A failure on rank 0 is raised there and reported on the other ranks.
    """
    from ares_cli.errors import StageFailure
    from ares_cli.training import distributed

    if not distributed.is_initialized():
        return _latest_verified(root, log)
    answer = None
    if distributed.is_main():
        try:
            found = _latest_verified(root, log)
        except Exception as err:
            distributed.broadcast_json({"error": f"{type(err).__name__}: {err}"})
            raise
        answer = {"name": found.name if found is not None else None}
    answer = distributed.broadcast_json(answer)
    if "error" in answer:
        raise StageFailure(f"rank 0 could not verify the checkpoints under {root}: {answer['error']}")
    return root / answer["name"] if answer["name"] is not None else None


def _latest_verified(root: Path, log: Callable[[str], None] | None) -> Path | None:
    for path in reversed(_complete_steps(root)):
        problems = checkpoint_problems(path)
        if not problems:
            return path
        message = f"checkpoint {path.name} is damaged ({'; '.join(problems)}); trying the previous one"
        (log or (lambda m: print(m, file=sys.stderr)))(message)
    return None


def dedupe_tied(state: dict) -> tuple[dict, dict[str, str]]:
    """Tensors with shared storage (tied embeddings) stored once: (unique tensors, {alias: stored name})."""
    tensors, aliases, seen = {}, {}, {}
    for name, value in state.items():
        key = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape))
        if key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        tensors[name] = value.detach().cpu().contiguous()
    return tensors, aliases


def load(path: Path, rank: int) -> tuple[dict, Any, dict[str, Any]]:
    """(model state dict, this rank's optimizer state, meta) of a checkpoint; restores this rank's RNG last."""
    from safetensors.torch import load_file

    meta = json.loads((path / STATE).read_text())
    model_state = load_file(str(path / "model.safetensors"))
    for alias, name in json.loads((path / "model.aliases.json").read_text()).items():
        model_state[alias] = model_state[name]
    optimizer_state = load_state(path / f"optimizer.rank{rank}")
    set_rng_state(load_state(path / f"rng.rank{rank}"))
    return model_state, optimizer_state, meta


def prune(root: Path, *, keep: Path) -> None:
    """Remove every checkpoint and temp dir under ``root`` except ``keep`` and the newest one before it.

    The previous checkpoint stays so that a ``keep`` damaged on disk later still leaves one to resume from;
    newer steps (left by a run that went further before a damaged checkpoint sent it back) are removed.
    """
    earlier = [p for p in _complete_steps(root) if p.name < keep.name]
    kept = {keep, *earlier[-(KEEP - 1) :]} if KEEP > 1 else {keep}
    for path in root.glob("step-*"):
        if path not in kept:
            shutil.rmtree(path, ignore_errors=True)


# ---- model and optimizer state -----------------------------------------------------------------------
def model_state(model, engine, dist) -> dict | None:
    """The full model state dict on rank 0, None elsewhere; a collective gather under ZeRO-3."""
    from ares_cli.training import distributed

    if distributed.zero_stage(engine) == 3:
        state = engine._zero3_consolidated_16bit_state_dict()  # every rank must call it
        return state if dist.is_main else None
    return model.state_dict() if dist.is_main else None


MASTER_WEIGHTS = (  # where DeepSpeed's optimizer wrappers keep this rank's fp32 master weights
    "single_partition_of_fp32_groups",  # ZeRO-1/2
    "fp32_groups_flat_partition",  # BF16_Optimizer (ZeRO-1 with bf16 weights and fp32 gradients)
    "fp32_groups_flat",  # FP16_Optimizer: ZeRO stage 0 with bf16 (or fp16) weights, fused
    "fp32_groups",  # FP16_UnfusedOptimizer: the same, unfused (a list of parameters per group)
)


def _wrapped(engine) -> bool:
    """Whether DeepSpeed wrapped the client optimizer (ZeRO, or 16-bit master weights); stage 0 in fp32
    steps the client's torch optimizer itself."""
    return hasattr(engine.optimizer, "optimizer")


def _fp32_partitions(engine) -> list:
    """This rank's fp32 master partitions: ZeRO-1/2 ``single_partition_of_fp32_groups``, the 16-bit
    wrappers' flat groups (stage 0 bf16, ZeRO-1 bf16), ZeRO-3 flat groups."""
    from ares_cli.errors import UsageError
    from ares_cli.training import distributed

    zero = engine.optimizer
    if distributed.zero_stage(engine) != 3:
        for name in MASTER_WEIGHTS:
            if hasattr(zero, name):
                groups = getattr(zero, name)
                return [p for group in groups for p in group] if name == "fp32_groups" else groups
        raise UsageError(
            f"checkpoints of DeepSpeed's {type(zero).__name__} are not supported: set save_every=0"
        )
    if getattr(zero, "params_in_nvme_and_cpu", False) or getattr(zero, "optimizer_swapper", None):
        raise UsageError("checkpoints with ZeRO-3 NVMe offload are not supported: set save_every=0")
    return zero.fp32_partitioned_groups_flat


@contextmanager
def _base_optimizer(engine):
    """The torch optimizer inside ZeRO with its parameter groups in place (ZeRO-3 fills them only to step)."""
    from ares_cli.training import distributed

    zero = engine.optimizer
    stage3 = distributed.zero_stage(engine) == 3
    if stage3:
        zero._set_fp32_optimizer_param_groups()
    try:
        yield zero.optimizer
    finally:
        if stage3:
            zero._clear_fp32_optimizer_param_groups()


def optimizer_state(engine, optimizer) -> Any:
    """This rank's optimizer state: a torch AdamW state dict (no DeepSpeed, or stage 0 in fp32, where the
    engine steps ``optimizer`` itself), or the rank's ZeRO-1/2/3 (or 16-bit wrapper's) partition of it."""
    if engine is None or not _wrapped(engine):
        return {"torch": optimizer.state_dict()}
    with _base_optimizer(engine) as base:
        return {"base": base.state_dict(), "fp32": list(_fp32_partitions(engine))}


def load_optimizer(engine, optimizer, state: Any) -> None:
    """Restore what :func:`optimizer_state` returned into ``optimizer`` (or the DeepSpeed engine's).

    The model weights were loaded before the engine was built, so the (bit16) parameters already match;
    the fp32 master partitions carry the extra precision of mixed-precision runs. Under ZeRO-3 in fp32
    a master partition *is* the parameter partition, so the copy also restores the weights in place.
    """
    import torch

    if engine is None or not _wrapped(engine):
        optimizer.load_state_dict(state["torch"])
        return
    with _base_optimizer(engine) as base:
        base.load_state_dict(state["base"])
    with torch.no_grad():
        for mine, saved in zip(_fp32_partitions(engine), state["fp32"], strict=True):
            mine.copy_(saved)


def save_final(path: Path, model, engine, tokenizer, dist) -> None:
    """``save_pretrained`` + tokenizer or processor on rank 0; drops the checkpoints (the model is the output)."""
    from ares_cli.training import distributed

    state = None
    if distributed.zero_stage(engine) == 3:
        state = engine._zero3_consolidated_16bit_state_dict()  # collective: every rank calls it
    if dist.is_main:
        model.config.use_cache = True
        with disk_errors(path):
            model.save_pretrained(str(path), state_dict=state)
        tokenizer.save_pretrained(str(path))
        shutil.rmtree(path.parent / "checkpoints", ignore_errors=True)
    distributed.barrier()
