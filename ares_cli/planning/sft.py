"""``ares plan sft``: the SFT stage's own preparation (collecting), the plan-only checks, the per-GPU estimate.

``ares sft``'s own preparation (``commands/sft.py``'s ``prepare``: config, ranks, DeepSpeed file, model, data, every
example encoded) -> model shapes and tokenizer -> images -> the per-GPU estimate at the data's longest
example -> suggestions when it does not fit.

The estimate (:func:`estimate_sft`, pure) is of one optimiser step at the data's real lengths and plans for
the worst micro-batch: as many rows of the longest encoded example as the token budget holds
(``max_tokens_per_micro_batch``; ``auto`` = max(2048, ``micro_batch_size`` of them)), or ``micro_batch_size``
rows of it without a budget (``length_grouped`` batching keeps similar lengths together), or one row of that
many concatenated (``packed``). Weights and optimizer states follow the ZeRO stage
(:func:`~ares_cli.planning.memory.model_state_terms`); without DeepSpeed, a bf16 run on GPU trains float32
weights under autocast, which keeps a bfloat16 copy of each weight for the backward. A frozen vision tower
holds no gradient or optimizer state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ares_cli.planning import input_checks, memory
from ares_cli.planning.memory import GIB, MicroBatch, Term, model_state_terms
from ares_cli.planning.report import PlanReport
from ares_cli.planning.shapes import ModelShape
from ares_cli.planning.suggest import Change, suggestions, zero_family
from ares_cli.planning.target import Estimate, Target, check_budget
from ares_cli.stages.checklist import Checklist

SFT_CHUNK = 128  # fused_token_stats' default chunk, which micro_loss uses


def plan_sft(prepare, target: Target) -> PlanReport:
    """The plan of ``ares sft``: ``prepare(**options)`` is the command's own preparation with its arguments
    bound (``commands/sft.py``'s ``prepare``); it runs with a collecting checklist, for ``target``'s ranks."""
    checks = Checklist(collect=True)
    prepared = prepare(world_size=target.world, on_gpu=True, checks=checks, hash_inputs=False)
    cfg = prepared.cfg
    report = PlanReport("sft", target, checks.results)
    shape = input_checks.model_checks(checks, prepared.model_path)
    if prepared.data_path is not None:
        _check_sft_images(checks, prepared.data_path)
    if cfg is None or prepared.lengths is None:
        return report
    report.facts["batch"] = {
        "ranks": target.world, "micro-batches per step per rank": prepared.accumulation,
        "examples": len(prepared.lengths), **(prepared.counts or {}),
        "longest example": max(prepared.lengths), "mean example": round(sum(prepared.lengths) / len(prepared.lengths), 1),
    }  # fmt: skip
    if shape is None:
        return report
    facts = SFTFacts(tuple(prepared.lengths), tuple(prepared.response_tokens), prepared.zero)

    def estimator(c, z, t):
        return estimate_sft(c, shape, t, SFTFacts(facts.lengths, facts.response_tokens, z))

    report.estimate = estimator(cfg, prepared.zero, target)
    if not report.estimate.fits:
        families = sft_families(cfg, prepared.zero, target, params=shape.params)
        report.suggestions = suggestions(cfg, prepared.zero, target, families, estimator)
    return report


def _check_sft_images(checks: Checklist, data_path) -> None:
    """Every image an SFT row names opens and decodes (file, row and field of each that does not)."""
    from ares_cli.data.images import resolve_images
    from ares_cli.data.jsonl import parse_jsonl

    records, locations = [], []
    for n, row in parse_jsonl(data_path)[0]:
        if isinstance(row, dict) and row.get("images"):
            try:
                records.append({"images": resolve_images(row["images"], data_path.parent)})
            except ValueError:
                continue  # a path the stage's own image check names
            locations.append((str(data_path), n))
    input_checks.check_images(checks, "images (data)", records, locations)


def sft_families(cfg, zero, target: Target, *, params: int) -> list[list[Change]]:
    families: list[list[Change]] = []
    if cfg.stats_path == "logits":
        families.append([Change("--set stats_path=fused", (("stats_path", "fused"),))])
    if not cfg.gradient_checkpointing:
        families.append([Change("--set gradient_checkpointing=true", (("gradient_checkpointing", True),))])
    if cfg.max_tokens_per_micro_batch is None:
        sizes = [cfg.micro_batch_size // 2**k for k in range(1, 8) if cfg.micro_batch_size // 2**k >= 1]
        families.append([Change(f"--set micro_batch_size={m}", (("micro_batch_size", m),)) for m in sizes])
    else:  # a token budget holds at least the longest row: one row per micro-batch is the least
        families.append([Change("--set max_tokens_per_micro_batch=null --set micro_batch_size=1",
                                (("max_tokens_per_micro_batch", None), ("micro_batch_size", 1)))])  # fmt: skip
    families.append(zero_family(zero, target, params))
    families.append([Change(f"--gpus {target.gpus_per_node * k}", gpus_per_node=target.gpus_per_node * k)
                     for k in (2, 4, 8) if target.gpus_per_node * k <= 8])  # fmt: skip
    return [f for f in families if f]


# The estimate (pure): per-GPU memory and tokens of one SFT optimiser step at the data's lengths.
@dataclass(frozen=True)
class SFTFacts:
    """The encoded data's lengths (tokens per example, labelled tokens per example)."""

    lengths: tuple[int, ...]
    response_tokens: tuple[int, ...]
    zero: dict | None = None

    @property
    def longest(self) -> int:
        return max(self.lengths, default=1)

    @property
    def mean(self) -> float:
        return sum(self.lengths) / max(1, len(self.lengths))


def sft_micro_batch(cfg, facts: SFTFacts) -> MicroBatch:
    from ares_cli.training.micro_batches import token_budget

    longest = min(cfg.max_seq_len, facts.longest)
    budget = token_budget(cfg.max_tokens_per_micro_batch, [longest], cfg.micro_batch_size)
    rows = cfg.micro_batch_size if budget is None else max(1, budget // longest)
    response = min(longest, max(facts.response_tokens, default=1))
    shortest_prompt = min(
        (n - r for n, r in zip(facts.lengths, facts.response_tokens, strict=True)), default=0
    )
    if cfg.batching == "packed":
        return MicroBatch(rows=1, seq=rows * longest, keep=rows * response, predicted=rows * response)
    keep = max(1, min(longest, longest - shortest_prompt))
    return MicroBatch(rows=rows, seq=longest, keep=keep, predicted=rows * response)


def trainable_params(cfg, shape: ModelShape) -> int:
    if not (cfg.freeze_vision_tower and shape.vision_params):
        return shape.params
    return shape.params - shape.vision_params + (shape.merger_params if cfg.train_merger else 0)


def estimate_sft(cfg, shape: ModelShape, target: Target, facts: SFTFacts) -> Estimate:
    """The SFT step's per-GPU estimate for ``cfg`` on ``target``."""
    zero, world = facts.zero, target.world
    bf16 = cfg.dtype == "bf16" or cfg.dtype == "auto"  # auto = bf16 on the GPU machine
    autocast = zero is None and bf16
    b = 2 if (zero is not None and zero.get("bf16")) or autocast else 4
    trainable = trainable_params(cfg, shape)
    terms = model_state_terms(shape, trainable=trainable, zero=zero, world=world, gpus_per_node=target.gpus_per_node,
                              nodes=target.nodes, bf16=zero is not None and bool(zero.get("bf16")))  # fmt: skip
    if autocast:
        terms.append(Term("autocast weight copies", 2 * shape.params, "estimate",
                          "bfloat16 casts of the float32 weights, kept for backward"))  # fmt: skip
    mb = sft_micro_batch(cfg, facts)
    update = memory.update_terms(shape, mb, b, path=cfg.stats_path, chunk=SFT_CHUNK, loss="ce",
                                 checkpointing=cfg.gradient_checkpointing, autocast=autocast,
                                 grad_bytes=4 if autocast else b)  # fmt: skip
    shard = trainable if zero is None or zero["stage"] == 0 else trainable // world
    if zero is not None and zero["offload_optimizer"] != "none":
        shard = 0
    step = memory.optimizer_step_transient(shard)
    phase = (
        update
        if memory.total(update) >= step
        else [Term("optimizer step", step, "estimate", "AdamW temporary")]
    )
    terms += phase
    terms.append(memory.framework_allowance(memory.total(terms)))
    est = Estimate(terms=terms, budget=target.gpu_memory, budget_how=f"{target.gpu_memory / GIB:.0f} GiB")
    est.notes.append(f"micro-batch planned: {mb.rows} row(s) x {mb.seq} positions ({cfg.batching}; longest "
                     f"example {facts.longest} tokens, max_seq_len {cfg.max_seq_len})")  # fmt: skip
    if trainable < shape.params:
        est.notes.append(
            f"{shape.params - trainable:,} vision-tower parameters frozen (no gradient, no AdamW)"
        )
    check_budget(est, "the trainer")
    est.tokens_per_step = int(cfg.batch_size * min(facts.mean, cfg.max_seq_len))
    steps = math.ceil(len(facts.lengths) / cfg.batch_size)
    est.tokens_how = (f"batch_size {cfg.batch_size} x mean example {facts.mean:.0f} tokens; {steps} step(s) per "
                      f"epoch, {cfg.max_steps or cfg.epochs * steps} in the run")  # fmt: skip
    if target.throughput:
        est.seconds_per_step = est.tokens_per_step / (target.throughput * world)
    return est
