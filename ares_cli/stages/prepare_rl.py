"""The RL stage's preparation: everything ``ares rl`` checks before it opens its artifact or loads weights.

Config (ranges, cross-key rules, the algorithm preset), the DeepSpeed file (parsed, its batch keys filled
for the planned ranks, then validated by DeepSpeed's own parser), the model directory (tokenizer,
safetensors headers, or an artifact verified by hash), the training and validation problems (field map,
record schemas, images against the model), the generation budget against the model's context, the batch
arithmetic per rank and the prompts against ``rollout.max_prompt_tokens`` and the room the budget leaves
(token counts after the chat template). ``ares rl`` runs these steps through
a strict :class:`~ares_cli.stages.checklist.Checklist`; ``ares plan rl`` through a collecting one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError
from ares_cli.stages.checklist import Checklist
from ares_cli.training.rl.checks import check_branching, check_world_size, prompt_token_limit


@dataclass
class PreparedRL:
    """What the preparation found; fields are None where their step failed (plan only)."""

    cfg: Any = None
    model_path: str | None = None
    train: Any = None  # LoadedDataset
    val: Any = None
    deepspeed: dict[str, Any] | None = None  # the filled DeepSpeed config
    zero: dict[str, Any] | None = None  # ZeRO settings (check_deepspeed_config)
    prompt_lengths: list[int] | None = None  # per training problem, after the chat template
    prompt_limit: int | None = None  # the longest prompt the trainer keeps (prompt_token_limit)
    budget: Any = None  # the resolved rollout budget (models.budget.Budget)
    tokenizer: Any = None
    refs: dict[str, Any] = field(default_factory=dict)  # InputRefs keying the artifact (with hash_inputs)
    world_size: int = 1

    def needs_ref(self) -> bool:
        """Whether the algorithm trains against a frozen reference model (its KL term)."""
        from ares_cli.training.rl.registry import build_algorithm

        return build_algorithm(self.cfg, lambda t: t).needs_ref()

    @property
    def inputs(self) -> list:
        """The stage's inputs in their keyed order: model, data, val_data, deepspeed."""
        return [self.refs[k] for k in ("model", "data", "val_data", "deepspeed") if self.refs.get(k)]


def micro_accumulation(cfg, world_size: int) -> int:
    """Micro-batches per optimiser step on one rank (the DeepSpeed gradient-accumulation count)."""
    local_rows = cfg.optim.mini_batch_size // world_size * cfg.rollout.group_size
    return -(-local_rows // cfg.optim.micro_batch_size)


def deepspeed_settings(cfg, world_size: int, *, on_gpu: bool) -> tuple[dict, dict]:
    """The DeepSpeed config the trainer would build for ``world_size`` ranks, and its ZeRO settings."""
    from ares_cli.training import distributed
    from ares_cli.training.offload import with_client_optimizer

    bf16 = cfg.optim.dtype == "bf16" or (cfg.optim.dtype == "auto" and on_gpu)
    ds = distributed.deepspeed_config(cfg.optim.deepspeed, micro_batch=cfg.optim.micro_batch_size,
                                      grad_accum=micro_accumulation(cfg, world_size), world_size=world_size,
                                      grad_clip=cfg.optim.grad_clip, bf16=bf16)  # fmt: skip
    ds = with_client_optimizer(ds, cfg.optim.deepspeed)
    return ds, distributed.check_deepspeed_config(ds, cfg.optim.deepspeed)


def prompt_lengths(problems: list[dict], tokenizer, model_path: str, rollout) -> list[int]:
    """Prompt token counts as the trainer encodes them (chat template, image tokens expanded; ``rollout``:
    the config's section)."""
    from ares_cli.models import load_processor
    from ares_cli.training.rl.rollout import encode_prompts

    processor = load_processor(model_path, min_pixels=rollout.min_pixels, max_pixels=rollout.max_pixels)
    return [len(ids) for ids in encode_prompts(tokenizer, problems, rollout, processor)]


def check_prompts_fit(lengths: list[int], limit: int) -> int:
    """How many prompts fit ``limit`` tokens; none is an InputError (the trainer drops the rest)."""
    kept = sum(n <= limit for n in lengths)
    if not kept:
        raise InputError(f"no training prompt fits rollout.max_prompt_tokens ({limit} tokens here; "
                         f"shortest: {min(lengths, default=0)} tokens)")  # fmt: skip
    return kept


def prepare_rl(
    store,
    *,
    model: str,
    data: str,
    val_data: str | None,
    yaml_path: Path | None,
    sets: list[str] | None,
    flags: dict[str, Any],
    world_size: int,
    on_gpu: bool,
    checks: Checklist | None = None,
    hash_inputs: bool = True,
    on_config=None,
) -> PreparedRL:
    """Run the RL stage's checks for ``world_size`` ranks; ``on_gpu`` decides ``optim.dtype=auto``.
    ``on_config(cfg)`` is called as soon as the config resolves (``ares plan`` starts its grader then)."""
    from ares_cli.models.budget import model_context
    from ares_cli.stages.inputs import resolve_model
    from ares_cli.training.rl import config as rlconfig
    from ares_cli.training.rl.shared_data import launched_together, share_from_main

    checks = checks or Checklist()
    out = PreparedRL(world_size=world_size)
    cfg = out.cfg = checks.run("config", lambda: rlconfig.resolve_rl_config(yaml_path=yaml_path, sets=sets,
                               flags=flags), lambda c: f"algo {c.algo}, {c.steps} steps")  # fmt: skip
    if cfg is not None:
        if on_config is not None:
            on_config(cfg)
        checks.run("ranks", lambda: check_world_size(cfg, world_size))
        if cfg.optim.deepspeed:
            out.zero = checks.run("deepspeed config",
                                  lambda: _deepspeed(store, cfg, world_size, on_gpu, out, hash_inputs),
                                  lambda z: f"ZeRO stage {z['stage']}")  # fmt: skip
    resolved = checks.run("model", lambda: resolve_model(store, model, hash_files=hash_inputs),
                          lambda r: str(r[0]))  # fmt: skip
    if resolved is not None:
        out.model_path, out.refs["model"] = resolved
    if cfg is not None and out.model_path is not None:
        out.budget = checks.run("generation budget", lambda: rlconfig.resolve_rollout_budget(
            cfg, out.model_path, model_context(out.model_path)), lambda b: b.describe())  # fmt: skip
    if launched_together(world_size):  # one rank reads, validates and counts; the others receive it
        share_from_main(lambda: _data_steps(checks, out, data, val_data, hash_inputs, share=True),
                        lambda sent: _receive(out, sent))  # fmt: skip
    else:
        _data_steps(checks, out, data, val_data, hash_inputs)
    return out


def _data_steps(checks: Checklist, out: PreparedRL, data: str, val_data: str | None, hash_inputs: bool,
                share: bool = False) -> dict | None:  # fmt: skip
    """The training and validation problems, their images against the model, choice golds, branching, and
    every prompt counted against the room it has; with ``share``, all of it as JSON for the other ranks
    (None when its images live in this machine's image cache and other ranks run elsewhere)."""
    from ares_cli.data.loader import load_problems
    from ares_cli.models import check_image_support, load_tokenizer
    from ares_cli.models.budget import model_context
    from ares_cli.stages.inputs import dataset_ref
    from ares_cli.training.rl.shared_data import has_images, one_machine, pack

    cfg = out.cfg
    limit = cfg.data_limit if cfg is not None else None
    skip = cfg.skip_invalid_rows if cfg is not None else False
    out.train = checks.run("data", lambda: load_problems(data, limit=limit, skip_invalid_rows=skip),
                           lambda d: f"{len(d)} problems")  # fmt: skip
    cfg = _grade_as_declared(out)
    if val_data:
        val_limit = cfg.val.limit if cfg is not None else None
        out.val = checks.run("val data", lambda: load_problems(val_data, limit=val_limit, skip_invalid_rows=skip),
                             lambda d: f"{len(d)} problems")  # fmt: skip
    loaded = [d for d in (out.train, out.val) if d is not None]
    if out.model_path is not None and loaded:
        checks.run("images vs model", lambda: [check_image_support(d.records, d.locations, out.model_path)
                                               for d in loaded])  # fmt: skip
    if cfg is not None:  # a choice gold that names no option: exit 3 naming its row, before any work
        from ares_cli.data.gold_check import check_choice_golds

        for d, source in ((out.train, data), (out.val, val_data)):
            if d is not None:
                checks.run("choice golds", lambda d=d, s=source: check_choice_golds(
                    d.records, cfg.grading.grader, s, cfg.grading.trust_grader_code, d.locations))  # fmt: skip
    if cfg is not None and out.train is not None:
        checks.run("branching", lambda: check_branching(cfg.rollout, out.train.records))
        if out.budget is not None:
            out.tokenizer = checks.run("tokenizer", lambda: load_tokenizer(out.model_path))
        if out.tokenizer is not None:
            out.prompt_lengths = checks.run("prompt lengths", lambda: prompt_lengths(
                out.train.records, out.tokenizer, out.model_path, cfg.rollout))  # fmt: skip
            if out.prompt_lengths is not None:
                out.prompt_limit = prompt_token_limit(cfg.rollout, model_context(out.model_path))
                checks.run("prompts fit", lambda: check_prompts_fit(out.prompt_lengths, out.prompt_limit),
                           lambda kept: f"{kept} of {len(out.prompt_lengths)} within {out.prompt_limit} tokens")  # fmt: skip
    if hash_inputs and out.train is not None:
        out.refs["data"] = dataset_ref(out.train.records, out.train.provenance)
        if out.val is not None:
            out.refs["val_data"] = dataset_ref(out.val.records, out.val.provenance, role="val_data")
    if not share or (has_images(out.train, out.val) and not one_machine()):
        return None
    return {"train": pack(out.train), "val": pack(out.val), "prompt_lengths": out.prompt_lengths,
            "prompt_limit": out.prompt_limit,
            "refs": {k: dataclasses.asdict(v) for k, v in out.refs.items() if k in ("data", "val_data")}}  # fmt: skip


def _grade_as_declared(out: PreparedRL):
    """The config with the grader the training data's manifest declares (its grading options too)."""
    if out.cfg is None or out.train is None:
        return out.cfg
    from dataclasses import replace

    from ares_cli.grading.declared import grader_for

    grader = grader_for(out.cfg.grading.grader, out.train.manifest)
    out.cfg = replace(out.cfg, grading=replace(out.cfg.grading, grader=grader))
    return out.cfg


def _receive(out: PreparedRL, sent: dict) -> None:
    """Rank 0's data, on another rank: the records, their prompt lengths and the inputs they key."""
    from ares_cli.store.artifacts import InputRef
    from ares_cli.training.rl.shared_data import unpack

    out.train, out.val = unpack(sent["train"]), unpack(sent["val"])
    _grade_as_declared(out)
    out.prompt_lengths, out.prompt_limit = sent["prompt_lengths"], sent["prompt_limit"]
    out.refs.update({k: InputRef(**v) for k, v in sent["refs"].items()})


def _deepspeed(store, cfg, world_size: int, on_gpu: bool, out: PreparedRL, hash_inputs: bool) -> dict:
    from ares_cli.stages.inputs import deepspeed_config_ref

    ref = deepspeed_config_ref(store, cfg.optim.deepspeed, hash_file=hash_inputs)  # missing: exit 3
    out.deepspeed, zero = deepspeed_settings(cfg, world_size, on_gpu=on_gpu)
    out.refs["deepspeed"] = ref
    return zero
