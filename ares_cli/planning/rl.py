"""``ares plan rl``: the RL stage's own preparation (collecting), the plan-only checks, the per-GPU estimate.

Read top to bottom: ``ares rl``'s own preparation (``commands/rl.py``'s ``prepare``) with a collecting checklist ->
model shapes and tokenizer -> images and gold answers of every dataset -> backend and context ->
batch arithmetic and prompt lengths per source -> the per-GPU estimate -> suggestions when it does not fit.

The estimate (:func:`estimate_rl`, pure; inputs from the prepared run) plans for the worst micro-batch:
every row with the data's longest fitting prompt and a response at ``rollout.max_new_tokens``. The step's
phases do not overlap in time, so the peak is the persistent state (weights, gradients, AdamW, the reference
model in the policy's dtype) plus the largest phase: the policy update's forward + backward, the old-policy
and reference no-grad passes, generation with the hf backend, or the optimizer step. With vLLM,
``rollout.vllm_gpu_memory_utilization`` of the GPU is the engine's while it is awake; the engine must hold
its 16-bit weights and the KV cache of at least one sequence of ``max_prompt_tokens + max_new_tokens`` (its
``max_model_len``) or it refuses to start. With ``rollout.sleep_mode`` (auto = on a GPU) the engine sleeps
through the passes and the update, keeping only its allowance: the trainer's budget is the GPU less that
allowance, and the engine's awake share becomes one more phase (the rollout), as does the weight sync (the
largest parameter gathered alone under ZeRO-3, plus the engine's woken weights) and, under ZeRO-3, the
start-up (the policy built partitioned under ``zero.Init``: its largest parameter whole while loading). A vision-language model's tower adds its
activations over the micro-batch's patches (``memory.vision_tower_bytes``) to the update and the no-grad
passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ares_cli.errors import UsageError
from ares_cli.planning import input_checks, memory
from ares_cli.planning.memory import GIB, VLLM_OVERHEAD, MicroBatch, Term, model_state_terms
from ares_cli.planning.report import PlanReport
from ares_cli.planning.shapes import ModelShape
from ares_cli.planning.suggest import Change, suggestions, zero_family
from ares_cli.planning.target import Estimate, Target, check_budget
from ares_cli.stages.checklist import Checklist
from ares_cli.training.micro_batches import budget_setting


def _pool_for(checks: Checklist, pool, grading, pools: list):
    """``pool``, or a new one when the stage resolved the grader further (the training data's manifest
    declares grading options): the golds are checked as the trainer grades them."""
    from ares_cli.grading.registry import resolve_grader

    if resolve_grader(grading.grader, trust_code=grading.trust_grader_code).label == pool.grader:
        return pool
    fresh = input_checks.gold_pool(
        checks, grading.grader, workers=grading.workers, timeout_s=grading.timeout_s
    )
    pools.append(fresh)
    return fresh


def plan_rl(prepare, target: Target) -> PlanReport:
    """The plan of ``ares rl``: ``prepare(**options)`` is the command's own preparation with its arguments
    bound (:func:`ares_cli.commands.rl.prepare`); it runs with a collecting checklist, for ``target``'s ranks."""
    checks = Checklist(collect=True)
    pools = []  # the grader's workers start as soon as the config names it, and load while checks run

    def start_grader(cfg):
        g = cfg.grading
        pools.append(input_checks.gold_pool(checks, g.grader, workers=g.workers, timeout_s=g.timeout_s))

    try:
        prepared = prepare(world_size=target.world, on_gpu=True, checks=checks, hash_inputs=False,
                           on_config=start_grader)  # fmt: skip
        shape = input_checks.model_checks(checks, prepared.model_path, prepared.tokenizer)
        pool = pools[0] if pools else None
        if pool is not None and prepared.cfg is not None:  # with the data manifest's grading options
            pool = _pool_for(checks, pool, prepared.cfg.grading, pools)
        for label, loaded in (("data", prepared.train), ("val data", prepared.val)):
            if loaded is None:
                continue
            input_checks.check_images(checks, f"images ({label})", loaded.records, loaded.locations)
            if pool is not None:  # the trainer grades against the pool's gold (with a choice's options)
                input_checks.check_gold_self_grades(checks, f"gold answers ({label})", loaded, pool)
    finally:
        for pool in pools:
            if pool is not None:
                pool.close()
    cfg = prepared.cfg
    report = PlanReport("rl", target, checks.results)
    if cfg is None:
        return report
    backend, how = input_checks.planned_backend(cfg.rollout.backend)
    checks.ok("backend", how)
    report.facts["batch"] = batch_arithmetic(cfg, target.world, prepared)
    if prepared.budget is None:  # no resolved response budget (or no model): nothing more to size
        return report
    lengths, limit = prepared.prompt_lengths, prepared.prompt_limit
    if shape is not None:
        _check_context(checks, cfg, shape, backend, limit)
    if prepared.train is not None and lengths is not None:
        report.facts["prompts per source"] = input_checks.source_table(
            prepared.train.records, lengths, drop_over=limit,
            context_over=(shape.context - cfg.rollout.max_new_tokens) if shape and shape.context else None)  # fmt: skip
    kept = [n for n in lengths or () if n <= limit]
    if shape is None or not kept:
        return report
    facts = RLFacts(longest_prompt=max(kept), mean_prompt=sum(kept) / len(kept), needs_ref=prepared.needs_ref(),
                    backend=backend, zero=prepared.zero)  # fmt: skip

    def estimator(c, z, t):
        return estimate_rl(c, shape, t, RLFacts(facts.longest_prompt, facts.mean_prompt, facts.needs_ref,
                                                facts.backend, z))  # fmt: skip

    report.estimate = estimator(cfg, prepared.zero, target)
    if not report.estimate.fits:
        families = rl_families(cfg, facts, target, report.estimate, params=shape.params)
        report.suggestions = suggestions(cfg, prepared.zero, target, families, estimator)
    return report


def _check_context(checks: Checklist, cfg, shape, backend: str, prompt_limit: int | None) -> None:
    """vLLM serves ``max_prompt_tokens + max_new_tokens`` (its max_model_len), refused past the context; the
    hf backend generates from prompts the trainer has cut to ``prompt_limit``, which leaves the budget room."""
    r = cfg.rollout
    length = r.max_prompt_tokens + r.max_new_tokens
    if shape.context is None or length <= shape.context:
        checks.ok("context", f"max_prompt_tokens + max_new_tokens = {length} <= context {shape.context}")
    elif backend == "vllm":
        checks.fail("context", UsageError(
            f"rollout.max_prompt_tokens {r.max_prompt_tokens} + rollout.max_new_tokens {r.max_new_tokens} = "
            f"{length} exceeds the model's {shape.context}-token context: vLLM refuses that max_model_len"))  # fmt: skip
    elif prompt_limit is not None:
        checks.ok("context", f"hf: prompts kept within {prompt_limit} tokens + max_new_tokens "
                  f"{r.max_new_tokens} <= context {shape.context}")  # fmt: skip
    val_new = cfg.val.max_new_tokens or r.max_new_tokens
    if backend == "vllm" and r.max_prompt_tokens + val_new > length:
        checks.warn("val budget", f"val.max_new_tokens {val_new} + prompts exceed the rollout engine's "
                    f"max_model_len {length}: validation responses are cut at {length} tokens")  # fmt: skip


def batch_arithmetic(cfg, world: int, prepared) -> dict:
    """Prompts and rows per rank, optimiser and micro steps per RL step, steps per epoch of the data."""
    r, o = cfg.rollout, cfg.optim
    per_rank = r.prompts_per_step // world if r.prompts_per_step % world == 0 else r.prompts_per_step / world
    rows = per_rank * r.group_size
    out = {"ranks": world, "prompts per rank": per_rank, "rollouts per rank": rows,
           "optimiser steps per RL step": r.prompts_per_step // o.mini_batch_size * o.ppo_epochs}  # fmt: skip
    if o.mini_batch_size % world == 0:
        local = o.mini_batch_size // world * r.group_size
        out["micro-batches per optimiser step per rank"] = math.ceil(local / o.micro_batch_size) if \
            budget_setting(cfg) is None else "by token budget"  # fmt: skip
    lengths, limit = prepared.prompt_lengths, prepared.prompt_limit
    if lengths and limit is not None:
        fitting = sum(n <= limit for n in lengths)
        if fitting:
            out["steps per epoch"] = round(fitting / r.prompts_per_step, 2)
            out["epochs in the run"] = round(cfg.steps * r.prompts_per_step / fitting, 2)
    return out


def rl_families(cfg, facts: RLFacts, target: Target, current, *, params: int) -> list[list[Change]]:
    """Candidate changes, family by family (see :mod:`ares_cli.planning.suggest`)."""
    o, r = cfg.optim, cfg.rollout
    families: list[list[Change]] = []
    if o.stats_path == "logits":
        families.append([Change("--set optim.stats_path=fused", (("optim.stats_path", "fused"),))])
    if not o.gradient_checkpointing:
        families.append(
            [Change("--set optim.gradient_checkpointing=true", (("optim.gradient_checkpointing", True),))]
        )
    if facts.backend == "vllm":
        utils = [u / 100 for u in range(int(r.vllm_gpu_memory_utilization * 100) - 5, 9, -5)]
        families.append([Change(f"--set rollout.vllm_gpu_memory_utilization={u:g}",
                                (("rollout.vllm_gpu_memory_utilization", u),)) for u in utils])  # fmt: skip
    mb = rl_micro_batch(cfg, facts.longest_prompt)
    row = facts.longest_prompt + r.max_new_tokens
    families.append([Change(f"--set optim.max_tokens_per_micro_batch={n * row}",
                            (("optim.max_tokens_per_micro_batch", n * row),)) for n in range(mb.rows - 1, 0, -1)])  # fmt: skip
    if budget_setting(cfg) is None:
        sizes = [o.micro_batch_size // 2**k for k in range(1, 8) if o.micro_batch_size // 2**k >= 1]
        families.append(
            [Change(f"--set optim.micro_batch_size={m}", (("optim.micro_batch_size", m),)) for m in sizes]
        )
    families.append(zero_family(facts.zero, target, params, key="optim.deepspeed"))
    families.append([_more_gpus(target, k) for k in (2, 4, 8) if _divides(cfg, target.world * k)])
    return [f for f in families if f]


def _more_gpus(target: Target, factor: int) -> Change:
    if target.nodes == 1 and target.gpus_per_node * factor <= 8:
        return Change(f"--gpus {target.gpus_per_node * factor}", gpus_per_node=target.gpus_per_node * factor)
    return Change(f"--nodes {target.nodes * factor}", nodes=target.nodes * factor)


def _divides(cfg, world: int) -> bool:
    return cfg.rollout.prompts_per_step % world == 0 and cfg.optim.mini_batch_size % world == 0


# The estimate (pure; its inputs from the prepared run): per-GPU memory and tokens of one RL step.
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
