"""Per-GPU memory and tokens of one RL step at the configured shapes (pure; inputs from the prepared run).

The worst micro-batch is planned for: every row with the data's longest fitting prompt and a response at
``rollout.max_new_tokens``. The step's phases do not overlap in time, so the peak is the persistent state
(weights, gradients, AdamW, the reference model in the policy's dtype) plus the largest phase: the policy update's
forward + backward, the old-policy and reference no-grad passes, generation with the hf backend, or the
optimizer step. With vLLM, ``rollout.vllm_gpu_memory_utilization`` of the GPU is the engine's and not the
trainer's; the engine must hold its 16-bit weights and the KV cache of at least one sequence of
``max_prompt_tokens + max_new_tokens`` (its ``max_model_len``) or it refuses to start.
"""

from __future__ import annotations

from dataclasses import dataclass

from ares_cli.planning import memory
from ares_cli.planning.memory import GIB, MicroBatch, Term
from ares_cli.planning.shapes import ModelShape
from ares_cli.planning.target import Estimate, Target, check_budget
from ares_cli.planning.zero import model_state_terms

VLLM_OVERHEAD = 2 * GIB  # CUDA graphs, sampler buffers, the profile run's activations (assumed)


@dataclass(frozen=True)
class RLFacts:
    """What the estimate needs besides the config: the data's prompt lengths and the algorithm's needs."""

    longest_prompt: int
    mean_prompt: float
    needs_ref: bool
    backend: str  # vllm | hf, as resolved on the GPU machine
    zero: dict | None = None  # ZeRO settings (None = plain torch)


def rl_micro_batch(cfg, longest_prompt: int) -> MicroBatch:
    """The largest micro-batch the plan can produce (``optim.micro_batch_size`` rows, or as many maximal
    rows as ``optim.max_tokens_per_micro_batch`` holds, ``auto`` included; one concatenated row when
    packing)."""
    from ares_cli.training.micro_batches import budget_setting, token_budget

    o, new = cfg.optim, cfg.rollout.max_new_tokens
    row = longest_prompt + new
    budget = token_budget(budget_setting(cfg), [row], o.micro_batch_size)
    rows = o.micro_batch_size if budget is None else max(1, budget // row)
    if o.pack_sequences:
        return MicroBatch(rows=1, seq=rows * row, keep=rows * new, predicted=rows * new)
    return MicroBatch(rows=rows, seq=row, keep=new + 1, predicted=rows * new)


def activation_bytes(zero: dict | None) -> int:
    """The trainer's dtype (``engines.training_dtype``): DeepSpeed with bf16 casts the module to bfloat16;
    plain torch RL trains float32 weights without autocast. The reference model is loaded in it too."""
    return 2 if zero is not None and zero.get("bf16") else 4


def estimate_rl(cfg, shape: ModelShape, target: Target, facts: RLFacts) -> Estimate:
    """The RL step's per-GPU estimate for ``cfg`` on ``target``."""
    r, o = cfg.rollout, cfg.optim
    b = activation_bytes(facts.zero)
    world = target.world
    persistent = model_state_terms(shape, trainable=shape.params, zero=facts.zero, world=world,
                                   gpus_per_node=target.gpus_per_node, nodes=target.nodes,
                                   bf16=b == 2)  # fmt: skip
    if facts.needs_ref:  # loaded in the policy's training dtype (engines.training_dtype), on every rank
        persistent.append(Term("reference model", b * shape.params, "exact",
                               f"frozen initial policy, {8 * b}-bit like the policy, on every rank"))  # fmt: skip
    mb = rl_micro_batch(cfg, facts.longest_prompt)
    update = memory.update_terms(shape, mb, b, path=o.stats_path, chunk=cfg.loss.chunk_size, loss="stats",
                                 checkpointing=o.gradient_checkpointing)  # fmt: skip
    phases = {"policy update (forward + backward)": update}
    nograd = memory.nograd_pass_bytes(shape, mb, b, path=o.stats_path, chunk=cfg.loss.chunk_size)
    phases["old-policy pass (no grad)"] = [Term("old-policy pass", nograd, "estimate", "one micro-batch")]
    if facts.needs_ref:
        ref = memory.nograd_pass_bytes(shape, mb, b, path=o.stats_path, chunk=cfg.loss.chunk_size)
        phases["reference pass (no grad)"] = [Term("reference pass", ref, "estimate", "one micro-batch")]
    if facts.backend == "hf":
        rows, seq = r.batch_size, facts.longest_prompt + r.max_new_tokens
        gen = memory.kv_cache_bytes(shape, rows, seq, b) + 2 * rows * shape.vocab * 4
        phases["generation (hf)"] = [Term("generation (hf backend)", gen, "estimate",
                                          f"KV cache of {rows} rows x {seq} tokens + sampling logits")]  # fmt: skip
    phases["optimizer step"] = [Term("optimizer step", memory.optimizer_step_transient(_shard(shape, facts, world)),
                                     "estimate", "AdamW's float32 temporary over this rank's moments")]  # fmt: skip
    peak_name = max(phases, key=lambda k: memory.total(phases[k]))
    terms = persistent + phases[peak_name]
    terms.append(memory.framework_allowance(memory.total(terms)))
    if facts.backend == "vllm":
        budget = int(target.gpu_memory * (1 - r.vllm_gpu_memory_utilization))
        how = f"{target.gpu_memory / GIB:.0f} GiB x (1 - rollout.vllm_gpu_memory_utilization {r.vllm_gpu_memory_utilization:g})"
    else:
        budget, how = target.gpu_memory, f"{target.gpu_memory / GIB:.0f} GiB, generation in the trainer (hf)"
    est = Estimate(terms=terms, budget=budget, budget_how=how)
    est.notes.append(f"peak phase: {peak_name}; " + ", ".join(
        f"{k} {memory.total(v) / GIB:.2f} GiB" for k, v in phases.items() if k != peak_name))  # fmt: skip
    est.notes.append(f"micro-batch planned: {mb.rows} row(s) x {mb.seq} positions (longest prompt "
                     f"{facts.longest_prompt} + max_new_tokens {r.max_new_tokens})")  # fmt: skip
    if shape.vision_params:
        est.notes.append("the vision tower's own activations are not counted (its image tokens are, as prompt "
                         "tokens of the language model)")  # fmt: skip
    check_budget(est, "the trainer")
    if facts.backend == "vllm":
        _vllm_share(est, cfg, shape, target, facts)
    rows_per_step = r.prompts_per_step * r.group_size
    est.tokens_per_step = int(rows_per_step * (facts.mean_prompt + r.max_new_tokens))
    est.tokens_how = (f"{r.prompts_per_step} prompts x G={r.group_size} x (mean prompt {facts.mean_prompt:.0f} "
                      f"+ max_new_tokens {r.max_new_tokens}): an upper bound, every response at the budget")  # fmt: skip
    if target.throughput:
        est.seconds_per_step = est.tokens_per_step / (target.throughput * world)
    return est


def _shard(shape: ModelShape, facts: RLFacts, world: int) -> int:
    zero = facts.zero
    if zero is None:
        return shape.params
    if zero["offload_optimizer"] != "none":
        return 0
    return shape.params if zero["stage"] == 0 else shape.params // world


def _vllm_share(est: Estimate, cfg, shape: ModelShape, target: Target, facts: RLFacts) -> None:
    """vLLM's share: 16-bit weights, an allowance, and the KV cache that is left (sequences resident at once)."""
    r = cfg.rollout
    share = int(target.gpu_memory * r.vllm_gpu_memory_utilization)
    weights = 2 * shape.params
    per_token = memory.kv_cache_bytes(shape, 1, 1, 2)
    max_len = r.max_prompt_tokens + r.max_new_tokens
    kv_tokens = max(0, share - weights - VLLM_OVERHEAD) // per_token
    est.engine_budget = share
    est.engine_need = weights + VLLM_OVERHEAD + per_token * max_len
    est.engine_terms = [
        Term("vLLM weights", weights, "exact", "16-bit copy of the policy"),
        Term("vLLM allowance", VLLM_OVERHEAD, "assumed", "CUDA graphs, sampler, profile-run activations"),
        Term("vLLM KV cache", max(0, share - weights - VLLM_OVERHEAD), "reserved",
             f"the rest of its share: {kv_tokens:,} tokens at {per_token:,} bytes/token"),
    ]  # fmt: skip
    if est.engine_need > share:
        est.reasons.append(
            f"vLLM's share ({share / GIB:.1f} GiB = rollout.vllm_gpu_memory_utilization {r.vllm_gpu_memory_utilization:g}) "
            f"cannot hold its weights ({weights / GIB:.1f} GiB) + allowance + one {max_len}-token sequence: "
            "the engine would refuse to start"
        )
        return
    per_rank = r.prompts_per_step // max(1, target.world) * r.group_size
    resident = kv_tokens // max_len
    est.notes.append(f"vLLM KV cache holds {kv_tokens:,} tokens: {resident} of this rank's {per_rank} rollouts "
                     f"at full length at once" + ("" if resident >= per_rank else " (the rest wait: slower, not OOM)"))  # fmt: skip
