"""Per-GPU memory and tokens of one RL step at the configured shapes (pure; inputs from the prepared run).

The worst micro-batch is planned for: every row with the data's longest fitting prompt and a response at
``rollout.max_new_tokens``. The step's phases do not overlap in time, so the peak is the persistent state
(weights, gradients, AdamW, the reference model in the policy's dtype) plus the largest phase: the policy update's
forward + backward, the old-policy and reference no-grad passes, generation with the hf backend, or the
optimizer step. With vLLM, ``rollout.vllm_gpu_memory_utilization`` of the GPU is the engine's while it is
awake; the engine must hold its 16-bit weights and the KV cache of at least one sequence of
``max_prompt_tokens + max_new_tokens`` (its ``max_model_len``) or it refuses to start. With
``rollout.sleep_mode`` (auto = on a GPU) the engine sleeps through the passes and the update, keeping only
its allowance: the trainer's budget is the GPU less that allowance, and the engine's awake share becomes one
more phase (the rollout), as does the weight sync (the largest parameter gathered alone under ZeRO-3, plus
the engine's woken weights) and, under ZeRO-3, the start-up (the policy built partitioned under ``zero.Init``:
its largest parameter whole while loading).
A vision-language model's tower adds its activations over the micro-batch's patches (``memory.vision_tower_bytes``)
to the update and the no-grad passes.
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
    from ares_cli.training.placement import reference_placement

    where = (
        reference_placement(cfg.kl.reference, (facts.zero or {}).get("stage", 0))
        if facts.needs_ref
        else "none"
    )
    if where in ("device", "zero3"):  # loaded in the policy's training dtype (engines.training_dtype)
        persistent.append(Term("reference model", b * shape.params // (world if where == "zero3" else 1), "exact",
                               f"frozen initial policy, {8 * b}-bit like the policy, kl.reference={where}"))  # fmt: skip
    mb = rl_micro_batch(cfg, facts.longest_prompt)
    update = memory.update_terms(shape, mb, b, path=o.stats_path, chunk=cfg.loss.chunk_size, loss="stats",
                                 checkpointing=o.gradient_checkpointing)  # fmt: skip
    phases = {"policy update (forward + backward)": update}
    nograd = memory.nograd_pass_bytes(shape, mb, b, path=o.stats_path, chunk=cfg.loss.chunk_size)
    phases["old-policy pass (no grad)"] = [Term("old-policy pass", nograd, "estimate", "one micro-batch")]
    if shape.vision[2]:  # every prompt token an image token: merge^2 patches each (an upper bound)
        patches = mb.rows * shape.vision[4] ** 2 * facts.longest_prompt
        how = f"{patches:,} patches (upper bound: every prompt token of the {mb.rows} row(s) an image token)"
        update.append(Term("vision tower activations", memory.vision_tower_bytes(
            shape, patches, b, grad=True, checkpointing=o.gradient_checkpointing), "estimate", how))  # fmt: skip
        phases["old-policy pass (no grad)"].append(Term("vision tower (no grad)", memory.vision_tower_bytes(
            shape, patches, b, grad=False, checkpointing=False), "estimate", how))  # fmt: skip
    if facts.needs_ref:
        ref = memory.nograd_pass_bytes(shape, mb, b, path=o.stats_path, chunk=cfg.loss.chunk_size)
        phases["reference pass (no grad)"] = [Term("reference pass", ref, "estimate", "one micro-batch")]
        phases["reference pass (no grad)"] += [t for t in phases["old-policy pass (no grad)"][1:]]
        if where == "cpu":
            phases["reference pass (no grad)"].append(Term("reference model (moved in)", b * shape.params, "exact",
                                                           "on the device for its pass only (kl.reference=cpu)"))  # fmt: skip
    if facts.backend == "hf":
        rows, seq = r.batch_size, facts.longest_prompt + r.max_new_tokens
        gen = memory.kv_cache_bytes(shape, rows, seq, b) + 2 * rows * shape.vocab * 4
        phases["generation (hf)"] = [Term("generation (hf backend)", gen, "estimate",
                                          f"KV cache of {rows} rows x {seq} tokens + sampling logits")]  # fmt: skip
    zero3 = facts.zero is not None and facts.zero.get("stage") == 3
    sleeping = facts.backend == "vllm" and cfg.rollout.sleep_mode != "off"
    if facts.backend == "vllm":  # the sync: one parameter whole (ZeRO-3), the engine's weights awake
        largest = b * largest_parameter(shape) if zero3 else 0
        sync = [Term("sync transient", largest, "exact", "the largest parameter, gathered alone (ZeRO-3)" if zero3
                     else "none: every parameter is whole on the rank already")]  # fmt: skip
        if sleeping:
            sync.append(Term("vLLM weights (awake for the sync)", 2 * shape.params, "exact",
                             "woken before the load; its KV cache only after it"))  # fmt: skip
        phases["weight sync"] = sync
    if sleeping:  # awake for the rollout (and at its start-up check) beside the trainer's persistent state
        share = int(target.gpu_memory * r.vllm_gpu_memory_utilization)
        phases["rollout (vLLM awake)"] = [Term("vLLM engine (awake)", max(0, share - VLLM_OVERHEAD), "reserved",
                                               f"its weights + KV cache: {r.vllm_gpu_memory_utilization:g} of the GPU "
                                               "less the allowance the budget keeps")]  # fmt: skip
    if zero3:  # built under zero.Init (training/zero3_init.py): one parameter whole at a time, then its shard
        phases["start-up (load)"] = [Term("largest parameter whole while loading", b * largest_parameter(shape), "exact",
                                          f"zero.Init: each module built and its checkpoint values scattered "
                                          f"whole, one at a time, {8 * b}-bit; the rest only as shards")]  # fmt: skip
    phases["optimizer step"] = [Term("optimizer step", memory.optimizer_step_transient(_shard(shape, facts, world)),
                                     "estimate", "AdamW's float32 temporary over this rank's moments")]  # fmt: skip
    peak_name = max(phases, key=lambda k: memory.total(phases[k]))
    terms = persistent + phases[peak_name]
    terms.append(memory.framework_allowance(memory.total([t for t in terms if t.basis != "reserved"])))
    if sleeping:  # asleep through the passes and the update: the engine keeps its allowance only
        budget = int(target.gpu_memory - VLLM_OVERHEAD)
        how = (f"{target.gpu_memory / GIB:.0f} GiB - the sleeping vLLM engine's allowance "
               f"({VLLM_OVERHEAD / GIB:.0f} GiB; rollout.sleep_mode)")  # fmt: skip
    elif facts.backend == "vllm":
        budget = int(target.gpu_memory * (1 - r.vllm_gpu_memory_utilization))
        how = f"{target.gpu_memory / GIB:.0f} GiB x (1 - rollout.vllm_gpu_memory_utilization {r.vllm_gpu_memory_utilization:g})"
    else:
        budget, how = target.gpu_memory, f"{target.gpu_memory / GIB:.0f} GiB, generation in the trainer (hf)"
    est = Estimate(terms=terms, budget=budget, budget_how=how, phases=phases)
    est.notes.append(f"peak phase: {peak_name}; " + ", ".join(
        f"{k} {memory.total(v) / GIB:.2f} GiB" for k, v in phases.items() if k != peak_name))  # fmt: skip
    est.notes.append(f"micro-batch planned: {mb.rows} row(s) x {mb.seq} positions (longest prompt "
                     f"{facts.longest_prompt} + max_new_tokens {r.max_new_tokens})")  # fmt: skip
    if shape.vision_params and not shape.vision[2]:
        est.notes.append("the vision tower's own activations are not counted (no vision_config dimensions; its "
                         "image tokens are, as prompt tokens of the language model)")  # fmt: skip
        est.unchecked.append("the vision tower's activations")
    elif shape.vision_params:
        est.unchecked.append("the vision tower's activations against measurement (an unmeasured formula)")
    if facts.backend == "vllm":
        est.unchecked.append("the vLLM engine's start-up and its real allowance (assumed "
                             f"{VLLM_OVERHEAD / GIB:.0f} GiB)")  # fmt: skip
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


def largest_parameter(shape: ModelShape) -> int:
    """Elements of the largest single parameter: the embedding (or head), else the widest MLP matrix."""
    return max(shape.vocab * shape.hidden, shape.hidden * shape.intermediate)


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
