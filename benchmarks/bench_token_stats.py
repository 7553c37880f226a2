"""Benchmark ``token_stats`` (all five statistics) against a naive reference and a bare logsumexp pass.

Prints one JSON object. For vocabularies 32k and 152k, 256 tokens, and two logit families:

- ``peaked``: Zipf-like rows, z_r = -s ln(rank) with s ~ U[1.5, 4] per row (top-1 mass ~0.4-0.9, a
  power-law tail; the typical shape of a trained LM's next-token distribution) plus N(0, 0.5) noise, with
  the ranks permuted per row;
- ``flat``: N(0, 0.01) logits (the worst case: the p = 0.85 nucleus is capped at top_k = 10 000, so the
  topk search grows to its maximum on every row).

Three functions on the same float32 logits, forward only, no autograd:
``logsumexp`` (torch.logsumexp over the vocabulary: the floor any log-prob computation pays),
``token_stats`` (this package, all five statistics, default chunk size) and ``naive`` (full float32
softmax, entropy and a full descending sort of the vocabulary for the nucleus, all tokens at once).

Time: best of ``--repeats`` wall-clock runs after a warm-up (one run for naive and for 1024 tokens),
also as a ratio to logsumexp.
Memory: the increase of the process's peak resident set size (VmHWM, reset through
/proc/self/clear_refs before each call) over its resident size just before the call, i.e. the extra RAM
the call really touched (temporaries and outputs; the input logits are already resident and not counted).
torch's CPU allocator returns large blocks to the OS on free, so this tracks the live high-water mark.
``--tokens 256 1024`` shows that token_stats' peak does not grow with the number of tokens.

Usage: python benchmarks/bench_token_stats.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ares_cli.algorithms.token_stats import DEFAULT_CHUNK_SIZE, token_stats  # noqa: E402


def naive(logits: torch.Tensor, targets: torch.Tensor, top_p: float = 0.85, top_k: int = 10000):
    x = logits.float()
    logp = torch.log_softmax(x, -1)
    lp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    sv, _ = torch.sort(x, -1, descending=True)
    cum = (sv - torch.logsumexp(x, -1, keepdim=True)).exp().cumsum(-1)
    n = ((cum < top_p).sum(-1) + 1).clamp(max=min(top_k, x.shape[-1]))
    inside = torch.arange(x.shape[-1]) < n.unsqueeze(-1)
    v = sv.masked_fill(~inside, float("-inf"))
    lq = torch.log_softmax(v, -1).masked_fill(~inside, 0.0)
    hn = -(lq.exp() * inside * lq).sum(-1)
    return lp, ent, hn, n, sv[:, 0] - sv[:, 1]


def make_logits(kind: str, t: int, v: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "flat":
        return torch.randn(t, v, generator=g) * 0.01
    out = torch.empty(t, v)
    log_rank = torch.arange(1, v + 1, dtype=torch.float32).log()
    perm = torch.randperm(v, generator=g)
    s = torch.empty(t).uniform_(1.5, 4.0, generator=g)
    shift = torch.randint(0, v, (t,), generator=g)
    for i in range(t):  # a cheap per-row permutation: a rolled random permutation
        out[i] = (-s[i] * log_rank)[(perm + shift[i]) % v]
    return out + torch.randn(t, v, generator=g) * 0.5


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{key}:\s+(\d+)", f.read(), re.M).group(1))


def peak_extra_mib(fn) -> float | None:
    """Peak RSS increase (MiB) during fn(); None where /proc/self/clear_refs is unavailable."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    base = _status_kib("VmRSS")
    out = fn()
    peak = _status_kib("VmHWM")
    del out
    return round((peak - base) / 1024, 1)


def best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def exactness(v: int, t: int = 512, seed: int = 1) -> dict:
    """Errors against float64 on peaked logits with sampled targets: token_stats versus a float32
    ``log_softmax`` (the naive reference); nucleus sizes (p = 0.85) compared with float64's."""
    logits = make_logits("peaked", t, v, seed=seed)
    logp64 = torch.log_softmax(logits.double(), -1)
    g = torch.Generator().manual_seed(seed)
    y = torch.multinomial(logp64.exp(), 1, generator=g).squeeze(-1)
    ref = logp64.gather(-1, y[:, None]).squeeze(-1)
    n64 = (logp64.exp().sort(-1, descending=True).values.cumsum(-1) < 0.85).sum(-1) + 1
    del logp64
    ours = token_stats(logits, y)
    lp32, _, _, n32, _ = naive(logits, y)
    return {
        "vocab": v, "tokens": t,
        "token_stats_logprob_max_abs_err": float((ours.logprob.double() - ref).abs().max()),
        "log_softmax_fp32_logprob_max_abs_err": float((lp32.double() - ref).abs().max()),
        "token_stats_nucleus_size_mismatches": int((ours.nucleus_size != n64).sum()),
        "log_softmax_fp32_nucleus_size_mismatches": int((n32 != n64).sum()),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="32k vocabulary only, one repeat")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    vocabs = [32768] if args.quick else [32768, 152064]
    repeats = 1 if args.quick else args.repeats
    torch.manual_seed(0)
    results = []
    for v in vocabs:
        for kind in ("peaked", "flat"):
            for t in (256, 1024):
                logits = make_logits(kind, t, v)
                targets = torch.randint(0, v, (t,))
                fns = {
                    "logsumexp": lambda x=logits: torch.logsumexp(x, -1),
                    "token_stats": lambda x=logits, y=targets: token_stats(x, y),
                    "naive": lambda x=logits, y=targets: naive(x, y),
                }
                if t != 256:  # the 1024-token rows only show how peak memory scales
                    if kind == "flat":
                        continue
                    fns = {k: f for k, f in fns.items() if k != "naive"}
                with torch.no_grad():
                    row = {"vocab": v, "tokens": t, "logits": kind}
                    stats = token_stats(logits, targets)
                    row["nucleus_size_mean"] = round(float(stats.nucleus_size.float().mean()), 1)
                    for name, fn in fns.items():
                        row[f"{name}_peak_extra_mib"] = peak_extra_mib(fn)  # also the warm-up run
                        n_rep = repeats if (t == 256 and name != "naive") else 1
                        row[f"{name}_s"] = round(best_time(fn, n_rep), 4)
                    for name in ("token_stats", "naive"):
                        if f"{name}_s" in row:
                            row[f"{name}_time_ratio_to_logsumexp"] = round(
                                row[f"{name}_s"] / row["logsumexp_s"], 2
                            )
                results.append(row)
                del logits
    report = {
        "benchmark": "token_stats",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "chunk_size": DEFAULT_CHUNK_SIZE,
        "memory_measure": "peak RSS increase over RSS before the call (VmHWM after clear_refs), MiB",
        "input_logits_mib": {f"{v}x{t}": round(v * t * 4 / 2**20, 1) for v in vocabs for t in (256, 1024)},
        "results": results,
        "exactness_vs_float64": [exactness(v) for v in vocabs],
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
