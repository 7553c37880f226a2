"""``ares plan sft``: the SFT stage's own preparation (collecting), the plan-only checks, the estimate.

``ares sft``'s own preparation (``commands/sft.py``'s ``prepare``: config, ranks, DeepSpeed file, model, data, every
example encoded) -> model shapes and tokenizer -> images -> the per-GPU estimate at the data's longest
example -> suggestions when it does not fit.
"""

from __future__ import annotations

from ares_cli.planning import data_checks
from ares_cli.planning.estimate_sft import SFTFacts, estimate_sft
from ares_cli.planning.plan_rl import model_checks
from ares_cli.planning.report import PlanReport
from ares_cli.planning.suggest import Change, suggestions, zero_family
from ares_cli.planning.target import Target
from ares_cli.stages.checklist import Checklist


def plan_sft(prepare, target: Target) -> PlanReport:
    """The plan of ``ares sft``: ``prepare(**options)`` is the command's own preparation with its arguments
    bound (``commands/sft.py``'s ``prepare``); it runs with a collecting checklist, for ``target``'s ranks."""
    checks = Checklist(collect=True)
    prepared = prepare(world_size=target.world, on_gpu=True, checks=checks, hash_inputs=False)
    cfg = prepared.cfg
    report = PlanReport("sft", target, checks.results)
    shape = model_checks(checks, prepared.model_path)
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
    data_checks.check_images(checks, "images (data)", records, locations)


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
