"""Decode with the KV cache allocated once (the default) against transformers' growing ``DynamicCache``;
prints JSON.

The same 32 prompts (20-60 tokens) and seeds, temperature 1, ``--max-new-tokens`` per row, one torch
thread, on the toy base and on ``llama30m`` (a random Llama with real widths: hidden 512, 4 layers, 32k
vocabulary; benchmarks/bench_rl_vs_trl.py builds it). Alternated reps; the report is each cache's median
and best time, their ratio, and whether every row's tokens and log-probs are identical.

    .venv/bin/python benchmarks/bench_decode_cache.py [--reps 3] [--max-new-tokens 128]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def bench(model_dir: Path, args) -> dict:
    import torch
    from transformers import DynamicCache

    from ares_cli.generation import decode
    from ares_cli.models import load_model

    model = load_model(model_dir).eval()
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(20, 60, (32,), generator=gen).tolist()
    prompts = [torch.randint(5, 90, (n,), generator=gen).tolist() for n in lengths]
    caches = {"preallocated": decode._new_cache, "dynamic": lambda m, capacity: DynamicCache(config=m.config)}
    times, outs = {k: [] for k in caches}, {}
    original = decode._new_cache
    try:
        for rep in range(args.reps):
            for name in caches if rep % 2 == 0 else reversed(list(caches)):
                decode._new_cache = caches[name]
                t0 = time.perf_counter()
                outs[name] = decode.decode_chunk(model, prompts, list(range(len(prompts))), temperature=1.0,
                                                 top_p=1.0, max_new_tokens=args.max_new_tokens, eos_ids={2},
                                                 pad_id=0)  # fmt: skip
                times[name].append(time.perf_counter() - t0)
    finally:
        decode._new_cache = original
    a, b = outs["preallocated"], outs["dynamic"]
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"tokens": sum(len(r.token_ids) for r in a),
            "identical_tokens": [r.token_ids for r in a] == [r.token_ids for r in b],
            "identical_logprobs": [r.logprobs for r in a] == [r.logprobs for r in b],
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "best_s": {k: round(min(v), 3) for k, v in times.items()},
            "ratio_preallocated_to_dynamic": round(med["preallocated"] / med["dynamic"], 3)}  # fmt: skip


def measure() -> dict:
    import torch
    from bench_rl_vs_trl import model_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="toy,llama30m")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = {
        "benchmark": "decode_cache",
        "reps": args.reps,
        "max_new_tokens": args.max_new_tokens,
        "models": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            out["models"][name] = bench(model_dir(name, Path(tmp) / name), args)
    return out


def main() -> None:
    # DeepSpeed logs to stdout when it is imported: stdout carries the JSON alone
    with contextlib.redirect_stdout(sys.stderr):
        out = measure()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
