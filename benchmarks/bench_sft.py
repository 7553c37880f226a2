"""SFT throughput on CPU: one process (plain torch) vs two processes (DeepSpeed ZeRO-2, gloo), same global batch.

Prints one JSON object. Uses the packaged toy base model when it exists, else a small random Llama.
Usage: ``.venv/bin/python benchmarks/bench_sft.py [--steps 6] [--examples 96]``
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
TOY_BASE = REPO / "ares_cli" / "toy" / "base"


def _model(tmp: Path) -> tuple[Path, str]:
    if (TOY_BASE / "config.json").is_file():
        return TOY_BASE, "toy-base"
    sys.path.insert(0, str(REPO / "tests"))
    from fixtures_tiny_model import save_tiny_model

    return save_tiny_model(tmp / "base", hidden=128, layers=4), "random-llama-h128-l4"


def _data(tmp: Path, n: int) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from fixtures_tiny_model import write_sft_jsonl

    return write_sft_jsonl(tmp / "sft.jsonl", n)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(tmp: Path, name: str, model: Path, data: Path, steps: int, world: int, threads_one: int = 0) -> dict:
    ares = str(Path(sys.executable).parent / "ares")
    args = [
        "--artifacts-root",
        str(tmp / name),
        "--json",
        "-q",
        "sft",
        "--model",
        str(model),
        "--data",
        str(data),
        "--batch-size",
        "16",
        "--max-steps",
        str(steps),
        "--set",
        "micro_batch_size=4",
        "--set",
        "max_seq_len=256",
        "--set",
        "save_every=0",
        "--lr",
        "1e-4",
    ]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    if world == 1:
        env["OMP_NUM_THREADS"] = str(threads_one)
        cmd = [ares, *args]
    else:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 2) // world))
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(world),
            "--master_port",
            str(_port()),
            ares,
            *args,
            "--deepspeed",
            str(REPO / "pipelines" / "deepspeed" / "zero2.json"),
        ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    line = next(line for line in proc.stdout.splitlines() if line.startswith("{"))
    stats = json.loads(line)["stats"]
    return {k: stats[k] for k in ("tokens_per_s", "tokens", "train_s", "final_loss", "world_size")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--examples", type=int, default=96)
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model, model_name = _model(tmp)
        data = _data(tmp, ns.examples)
        cpus = os.cpu_count() or 2
        one = _run(tmp, "one", model, data, ns.steps, 1, threads_one=cpus)
        one_thread = _run(tmp, "one_1thread", model, data, ns.steps, 1, threads_one=1)
        two = _run(tmp, "two", model, data, ns.steps, 2)
    print(
        json.dumps(
            {
                "benchmark": "sft_tokens_per_s_cpu",
                "model": model_name,
                "global_batch": 16,
                "micro_batch": 4,
                "steps": ns.steps,
                "cpus": os.cpu_count(),
                "note": "tokens/s include step 1 (warm-up); CPU numbers are sensitive to other load on the machine",
                "one_process": one,
                "one_process_1_thread": one_thread,
                "two_process_zero2_1_thread_each": two,
                "ratio_two_over_one": round(two["tokens_per_s"] / max(one["tokens_per_s"], 1e-9), 3),
                "ratio_two_over_best_one": round(
                    two["tokens_per_s"] / max(one["tokens_per_s"], one_thread["tokens_per_s"], 1e-9), 3
                ),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
