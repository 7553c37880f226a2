"""Per-GPU memory and tokens of ``passrate`` / ``eval`` generation (pure).

vLLM (``generation/vllm_backend.py``) takes ``gpu_memory_utilization`` 0.9 of the GPU (less a model
judge's ``judge.gpu_memory_utilization`` when one runs beside it: ``sampling.gpu_shares``) and, with no
``max_model_len`` given, serves the model's whole context: it must hold the 16-bit weights and the KV
cache of one sequence of that length. The hf backend holds 16-bit weights (bf16 on CUDA), the KV cache of
``batch_size`` rows at the longest prompt + ``max_new_tokens`` and the sampling logits.
"""

from __future__ import annotations

from dataclasses import dataclass

from ares_cli.planning import memory
from ares_cli.planning.estimate_rl import VLLM_OVERHEAD
from ares_cli.planning.memory import GIB, Term
from ares_cli.planning.shapes import ModelShape
from ares_cli.planning.target import Estimate, Target, check_budget

VLLM_UTILIZATION = 0.9  # VLLMBackend's default gpu_memory_utilization (passrate and eval keep it)


@dataclass(frozen=True)
class SamplingFacts:
    samples: int  # problems x K, over every benchmark
    longest_prompt: int
    mean_prompt: float
    backend: str  # vllm | hf on the GPU machine


def estimate_sampling(cfg, shape: ModelShape, target: Target, facts: SamplingFacts) -> Estimate:
    """Generation memory per GPU, and the tokens of the whole run (every sample at the budget)."""
    per_token = memory.kv_cache_bytes(shape, 1, 1, 2)
    longest = facts.longest_prompt + cfg.max_new_tokens
    weights = Term("weights", 2 * shape.params, "exact", "16-bit")
    if facts.backend == "vllm":
        from ares_cli.stages.sampling import gpu_shares

        utilization, judge = gpu_shares(cfg)
        share = int(target.gpu_memory * utilization)
        max_len = shape.context or longest
        kv = max(0, share - weights.bytes - VLLM_OVERHEAD)
        terms = [weights, Term("vLLM allowance", VLLM_OVERHEAD, "assumed", "CUDA graphs, sampler, profile run"),
                 Term("KV cache (one max_model_len sequence)", per_token * max_len, "exact",
                      f"{max_len} tokens (the model's context) x {per_token:,} bytes")]  # fmt: skip
        how = f"gpu_memory_utilization {utilization:g}" + (
            f" ({VLLM_UTILIZATION:g} less the model judge's judge.gpu_memory_utilization {judge:g})"
            if judge
            else ""
        )
        est = Estimate(terms=terms, budget=share, budget_how=how)
        est.notes.append(f"KV cache holds {kv // per_token:,} tokens: {kv // per_token // max(1, longest)} "
                         f"sequences of {longest} tokens at once")  # fmt: skip
    else:
        rows = cfg.batch_size
        terms = [weights,
                 Term("KV cache", memory.kv_cache_bytes(shape, rows, longest, 2), "exact",
                      f"{rows} rows x {longest} tokens"),
                 Term("prefill + sampling", rows * facts.longest_prompt * 3 * shape.intermediate * 2
                      + 2 * rows * shape.vocab * 4, "estimate", "one MLP's temporaries over the prompts, logits")]  # fmt: skip
        terms.append(memory.framework_allowance(memory.total(terms)))
        est = Estimate(terms=terms, budget=target.gpu_memory, budget_how=f"{target.gpu_memory / GIB:.0f} GiB")
    check_budget(est, f"{facts.backend} generation")
    est.tokens_per_step = int(facts.samples * (facts.mean_prompt + cfg.max_new_tokens))
    est.tokens_how = (f"{facts.samples} samples x (mean prompt {facts.mean_prompt:.0f} + max_new_tokens "
                      f"{cfg.max_new_tokens}): the whole run, an upper bound")  # fmt: skip
    if target.throughput:
        est.seconds_per_step = est.tokens_per_step / (target.throughput * target.world)
    return est
