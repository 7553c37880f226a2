"""``ares plan rl``: the RL stage's own preparation (collecting), the plan-only checks, the estimate.

Read top to bottom: ``ares rl``'s own preparation (``commands/rl.py``'s ``prepare``) with a collecting checklist ->
model shapes and tokenizer -> images and gold answers of every dataset -> backend and context ->
batch arithmetic and prompt lengths per source -> the per-GPU estimate -> suggestions when it does not fit.
"""

from __future__ import annotations

import math

from ares_cli.errors import UsageError
from ares_cli.planning import data_checks
from ares_cli.planning.estimate_rl import RLFacts, estimate_rl, rl_micro_batch
from ares_cli.planning.report import PlanReport
from ares_cli.planning.shapes import read_model_shape
from ares_cli.planning.suggest import Change, suggestions, zero_family
from ares_cli.planning.target import Target
from ares_cli.stages.checklist import Checklist
from ares_cli.training.micro_batches import budget_setting


def planned_backend(name: str) -> tuple[str, str]:
    """The backend ``auto`` picks on a GPU machine: vllm when installed (checked here), else hf."""
    import importlib.util

    if name in ("hf", "vllm"):
        return name, f"{name} (configured)"
    if importlib.util.find_spec("vllm") is not None:
        return "vllm", "auto -> vllm (installed here; a GPU machine picks it when CUDA is present)"
    return "hf", "auto -> hf: vllm is not installed here (install ares-cli[vllm] on the GPU machine for vllm)"


def describe_shape(s) -> str:
    return (f"{s.architecture}: {s.params / 1e9:.3f}B parameters ({s.checkpoint_dtype} checkpoint, "
            f"{s.checkpoint_bytes / 2**30:.2f} GiB), vocab {s.vocab}, {s.layers} layers x {s.hidden}, "
            f"context {s.context}")  # fmt: skip


def _pool_for(checks: Checklist, pool, grading, pools: list):
    """``pool``, or a new one when the stage resolved the grader further (the training data's manifest
    declares grading options): the golds are checked as the trainer grades them."""
    from ares_cli.grading.registry import resolve_grader

    if resolve_grader(grading.grader, trust_code=grading.trust_grader_code).label == pool.grader:
        return pool
    fresh = data_checks.gold_pool(
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
        pools.append(data_checks.gold_pool(checks, g.grader, workers=g.workers, timeout_s=g.timeout_s))

    try:
        prepared = prepare(world_size=target.world, on_gpu=True, checks=checks, hash_inputs=False,
                           on_config=start_grader)  # fmt: skip
        shape = model_checks(checks, prepared.model_path, prepared.tokenizer)
        pool = pools[0] if pools else None
        if pool is not None and prepared.cfg is not None:  # with the data manifest's grading options
            pool = _pool_for(checks, pool, prepared.cfg.grading, pools)
        for label, loaded in (("data", prepared.train), ("val data", prepared.val)):
            if loaded is None:
                continue
            data_checks.check_images(checks, f"images ({label})", loaded.records, loaded.locations)
            if pool is not None:  # the trainer grades against the pool's gold (with a choice's options)
                data_checks.check_golds(checks, f"gold answers ({label})", loaded, pool)
    finally:
        for pool in pools:
            if pool is not None:
                pool.close()
    cfg = prepared.cfg
    report = PlanReport("rl", target, checks.results)
    if cfg is None:
        return report
    backend, how = planned_backend(cfg.rollout.backend)
    checks.ok("backend", how)
    report.facts["batch"] = batch_arithmetic(cfg, target.world, prepared)
    if prepared.budget is None:  # no resolved response budget (or no model): nothing more to size
        return report
    lengths, limit = prepared.prompt_lengths, prepared.prompt_limit
    if shape is not None:
        _check_context(checks, cfg, shape, backend, limit)
    if prepared.train is not None and lengths is not None:
        report.facts["prompts per source"] = data_checks.source_table(
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


def model_checks(checks: Checklist, model_path: str | None, tokenizer=None):
    """The model's shapes from config.json and safetensors headers, its tokenizer's special tokens, and a
    vision-language model's processor."""
    if model_path is None:
        return None
    shape = checks.run("model shapes", lambda: read_model_shape(model_path), describe_shape)
    if shape is not None:
        data_checks.check_tokenizer(checks, model_path, shape.vocab, tokenizer)
        if shape.vision_params:
            from ares_cli.models import load_processor

            checks.run("processor", lambda: load_processor(model_path), lambda p: type(p).__name__)
    return shape


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
