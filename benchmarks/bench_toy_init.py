"""Benchmark: build the toy base checkpoint from scratch into a temp dir; prints JSON.

Usage: python benchmarks/bench_toy_init.py [--steps N] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--steps", type=int, default=None, help="training steps (default: the shipped config)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()

    from ares_cli.toy.build import build_base

    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        info = build_base(tmp, steps=args.steps, num_threads=args.threads)
        seconds = time.perf_counter() - began
        model_bytes = (Path(tmp) / "model.safetensors").stat().st_size
        total_bytes = sum(p.stat().st_size for p in Path(tmp).iterdir() if p.is_file())
    print(
        json.dumps(
            {
                "toy_init_seconds": round(seconds, 1),
                "train_seconds": info["train_seconds"],
                "params": info["params"],
                "steps": info["build_config"]["steps"],
                "final_loss": info["final_loss"],
                "model_bytes": model_bytes,
                "checkpoint_bytes": total_bytes,
                "torch_threads": info["torch_threads"],
            }
        )
    )


if __name__ == "__main__":
    main()
