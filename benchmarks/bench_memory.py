"""Peak extra memory and time of one RL micro-step (forward + statistics + loss + backward) on CPU, for the
fused statistics path against the logits path, at 1k-8k response tokens with the full 152,064-token
vocabulary (Qwen2.5) and a small hidden size.

The model: a 1-layer Llama, hidden 64, untied lm_head [152064 x 64]; one row of a 32-token prompt and an
R-token response; GRPO's statistics (log-prob and entropy) and a policy-gradient-like loss. Memory is the
increase of the process's peak resident set (VmHWM after /proc/self/clear_refs) over the resident size
just before the step, so it counts every temporary of forward and backward (model and inputs excluded).
The logits path holds [R x V] float32 logits plus their gradient (~1.2 GiB per 1k tokens); sizes whose
estimate exceeds half of MemAvailable are skipped and reported as such (``--max-gib`` overrides).

    python benchmarks/bench_memory.py [--tokens 1024 2048 4096 8192] [--out benchmarks/results/memory.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_token_stats import peak_extra_mib  # noqa: E402

VOCAB, HIDDEN, PROMPT = 152064, 64, 32


def tiny_wide_model(vocab: int = VOCAB, hidden: int = HIDDEN):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=16384,
                      tie_word_embeddings=False)  # fmt: skip
    return LlamaForCausalLM(cfg)


def one_row_batch(response: int, vocab: int = VOCAB, prompt: int = PROMPT):
    from ares_cli.training.rl.batch import RolloutBatch

    g = torch.Generator().manual_seed(response)
    return RolloutBatch(
        torch.randint(0, vocab, (1, prompt), generator=g), torch.ones(1, prompt, dtype=torch.long),
        torch.randint(0, vocab, (1, response), generator=g), torch.ones(1, response),
        torch.zeros(1, dtype=torch.long),
    )  # fmt: skip


def micro_step(model, mb, path: str, chunk_size: int = 128) -> float:
    """forward_stats + a policy-gradient-like loss + backward; returns the loss."""
    from ares_cli.training.rl.batch import forward_stats

    model.zero_grad(set_to_none=True)
    stats = forward_stats(model, mb, stats=("logprob", "entropy"), temperature=1.0, chunk_size=chunk_size,
                          stats_path=path)  # fmt: skip
    loss = -(stats.logprob * mb.response_mask).sum() / mb.response_mask.sum()
    loss.backward()
    return float(loss.detach())


def _available_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("inf")


def logits_estimate_gib(tokens: int, vocab: int = VOCAB) -> float:
    """Logits + their gradient + the lm_head's gradient input, float32."""
    return 3 * tokens * vocab * 4 / 2**30


def run(tokens: list[int], vocab: int = VOCAB, hidden: int = HIDDEN, max_gib: float | None = None) -> dict:
    model = tiny_wide_model(vocab, hidden)
    limit = max_gib if max_gib is not None else _available_gib() / 2
    rows = []
    for r in tokens:
        mb = one_row_batch(r, vocab)
        row = {"response_tokens": r}
        for path in ("fused", "logits"):
            if path == "logits" and logits_estimate_gib(r, vocab) > limit:
                row[f"{path}_skipped"] = (
                    f"needs ~{logits_estimate_gib(r, vocab):.1f} GiB > limit {limit:.1f} GiB"
                )
                continue
            t0 = time.perf_counter()
            row[f"{path}_peak_extra_mib"] = peak_extra_mib(lambda p=path, b=mb: micro_step(model, b, p))
            row[f"{path}_s"] = round(time.perf_counter() - t0, 3)
        if "logits_s" in row:
            row["time_ratio_fused_to_logits"] = round(row["fused_s"] / row["logits_s"], 3)
            if row["fused_peak_extra_mib"] and row["logits_peak_extra_mib"]:
                row["memory_ratio_fused_to_logits"] = round(
                    row["fused_peak_extra_mib"] / row["logits_peak_extra_mib"], 4
                )
        row["hidden_states_mib"] = round((PROMPT + r) * hidden * 4 / 2**20, 2)
        row["logits_fp32_mib"] = round(r * vocab * 4 / 2**20, 1)
        rows.append(row)
    return {
        "benchmark": "rl_micro_step_memory",
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "vocab": vocab,
        "hidden": hidden,
        "prompt_tokens": PROMPT,
        "memory_measure": "peak RSS increase over RSS before the step (VmHWM after clear_refs), MiB",
        "results": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--max-gib", type=float, default=None, help="largest logits-path estimate to run")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/memory.json"))
    args = ap.parse_args()
    report = run(args.tokens, max_gib=args.max_gib)
    text = json.dumps(report, indent=1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
