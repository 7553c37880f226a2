"""Per-rank memory of loading a model under ZeRO-3: built partitioned (``zero.Init`` through transformers,
:mod:`ares_cli.training.zero3_init`, what ``ares rl`` / ``ares sft`` do now) against built whole and
partitioned by ``deepspeed.initialize`` (what they did before). 2 CPU ranks, gloo, the ZeRO-3 file the
recipes use (pipelines/deepspeed/zero3.json), a model in bf16 (the training dtype on a GPU).

Per rank and path: ``held_after_load_bytes``, the bytes of parameter storage the rank holds when the load
returns (a partition's ``ds_tensor``, or the whole tensor), exact; ``held_after_initialize_bytes``, the same
once the optimizer-less ZeRO-3 engine (the reference's) has been built; ``peak_rss_load_mib`` and
``peak_rss_start_mib``, the increase of the peak resident set (VmHWM after /proc/self/clear_refs) over the
resident size just before the load, through the load and through load + initialize. The resident set
counts the pages of the safetensors file a rank reads (rank 0 reads the checkpoint on the partitioned path;
the other ranks read nothing) as well as tensors: on a GPU only the parameter storage is device memory.

    python benchmarks/bench_zero3_load.py [--model DIR | --twin qwen2.5-math-1.5b --layers 2]
        [--out benchmarks/results/zero3_load.json]                                       # prints one JSON
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
ZERO3 = REPO / "pipelines" / "deepspeed" / "zero3.json"


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def held_bytes(model) -> int:
    """Bytes of parameter storage on this rank: a ZeRO-3 partition's, else the whole tensor's."""
    total = 0
    for p in model.parameters():
        t = p.ds_tensor if hasattr(p, "ds_tensor") else p.data
        total += t.numel() * t.element_size()
    return total


def whole_bytes(model) -> int:
    """Bytes of every parameter whole (``ds_numel`` where partitioned)."""
    return sum(int(getattr(p, "ds_numel", p.numel())) * p.element_size() for p in model.parameters())


def rank_main(model_dir: str, path: str, out: str) -> None:
    """One rank: load ``model_dir`` partitioned or whole, then build the ZeRO-3 engine; write its figures."""
    import gc

    from ares_cli.models import load_model
    from ares_cli.training import distributed
    from ares_cli.training.rl.reference import zero3_inference_config
    from ares_cli.training.zero3_init import partitioned_loading

    dist = distributed.init_from_env(cpu=True)
    config = distributed.deepspeed_config(ZERO3, micro_batch=1, grad_accum=1, world_size=dist.world_size,
                                          grad_clip=1.0, bf16=True)  # fmt: skip
    config = zero3_inference_config(config)
    with distributed.deepspeed_ready():
        import deepspeed  # noqa: F401  (imported before the measurement: its import is not the load's)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    with partitioned_loading(config if path == "partitioned" else None):
        model = load_model(model_dir, dtype="bf16").eval().requires_grad_(False)
    load_peak = _status_kib("VmHWM")
    held_load = held_bytes(model)
    distributed.deepspeed_engine(model, None, config)
    start_peak = _status_kib("VmHWM")
    row = {"rank": dist.rank, "path": path, "whole_model_bytes": whole_bytes(model),
           "held_after_load_bytes": held_load, "held_after_initialize_bytes": held_bytes(model),
           "peak_rss_load_mib": round((load_peak - before) / 1024, 1),
           "peak_rss_start_mib": round((start_peak - before) / 1024, 1)}  # fmt: skip
    Path(out, f"{path}.rank{dist.rank}.json").write_text(json.dumps(row))
    distributed.leave_process(0)


def _launch(model_dir: str, path: str, out: Path, world: int = 2) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                        "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}  # fmt: skip
    procs = [subprocess.Popen([sys.executable, __file__, "--rank-of", model_dir, path, str(out)],
                              env=env | {"RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]  # fmt: skip
    errors = [p.communicate(timeout=1200)[1] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{path}: a rank failed:\n" + "\n".join(e[-3000:] for e in errors))
    return [json.loads((out / f"{path}.rank{r}.json").read_text()) for r in range(world)]


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--rank-of":
        rank_main(*sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model directory (default: build --twin)")
    parser.add_argument("--twin", default="qwen2.5-math-1.5b")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            from ares_cli.rehearsal.twins import build_twin

            model_dir = str(Path(tmp) / "twin")
            build_twin(args.twin, model_dir, layers=args.layers)
        rows = _launch(model_dir, "whole", Path(tmp)) + _launch(model_dir, "partitioned", Path(tmp))
    result = {"model": args.model or f"{args.twin} twin, {args.layers} layers", "ranks": 2, "dtype": "bf16",
              "config": str(ZERO3.relative_to(REPO)), "rows": rows}  # fmt: skip
    text = json.dumps(result)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
