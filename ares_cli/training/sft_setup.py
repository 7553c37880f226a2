"""Set-up of an SFT run: what stays fixed over its optimiser steps (:class:`SFTRun`: model, data, step plan,
optimizer) and what a checkpoint carries from one step to the next (:class:`SFTState`).

:func:`set_up` seeds every RNG, loads the model (vision tower frozen as configured) and the examples, plans
the steps, resumes from the newest checkpoint that verifies (weights go in before the optimizer and ZeRO's
fp32 partitions are built from them) and builds the optimizer and the DeepSpeed engine. Under ZeRO-3 the
model is built partitioned (:mod:`ares_cli.training.zero3_init`), never whole on a rank.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ares_cli.errors import UsageError


def _new_counters() -> dict[str, Any]:
    return {"tokens": 0, "response_tokens": 0, "train_s": 0.0, "loss": None}


@dataclass
class SFTState:
    """Where the loop stands: optimiser steps done and the running counters (tokens, response tokens,
    training seconds, the last loss); both are checkpointed."""

    step: int = 0
    counters: dict[str, Any] = field(default_factory=_new_counters)


@dataclass
class SFTRun:
    """The fixed parts of an SFT run, built once by :func:`set_up`."""

    config: Any  # sft.SFTConfig
    dist: Any  # distributed.Dist: rank, world size, device
    out_dir: Path
    log: Callable[[str], None]  # silent on ranks other than the main one
    progress: Any  # console.Progress, or None (and on ranks other than the main one)
    tokenizer: Any
    processor: Any  # images -> pixels for a VL model; None for a text model
    pad_id: int
    model: Any
    frozen: int  # parameters frozen with the vision tower
    examples: list  # sft_data.Example
    data_counts: dict[str, int]  # rows, truncated, dropped_no_response
    n_micro: int  # micro-batches per rank and optimiser step
    steps_per_epoch: int
    total_steps: int
    optimizer: Any
    engine: Any  # the DeepSpeed engine, or None (torch)
    trainable: list  # the parameters that get gradients
    autocast: Any  # bf16 autocast on a GPU without DeepSpeed; disabled otherwise

    @property
    def ckpt_root(self) -> Path:
        return self.out_dir / "checkpoints"

    @property
    def forward(self):
        """What the micro-batches run through: the DeepSpeed engine, or the model."""
        return self.engine if self.engine is not None else self.model

    def show_progress(self, completed: int, total: int | None = None) -> None:
        """Advance the progress bar (if any) to ``completed`` steps."""
        if self.progress is not None:
            self.progress.update(completed, total=total)


def accumulation_steps(config, world_size: int) -> int:
    """Micro-batches per rank and optimiser step: ``batch_size`` over ``micro_batch_size`` x ranks."""
    per_pass = config.micro_batch_size * world_size
    if config.batch_size % per_pass:
        raise UsageError(
            f"batch_size {config.batch_size} is not a multiple of micro_batch_size "
            f"{config.micro_batch_size} x {world_size} rank(s)"
        )
    return config.batch_size // per_pass


def param_groups(model, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on matrices, none on biases and norms; frozen parameters left out. A ZeRO-3
    partition (an empty 1-D ``data``) is grouped by its real shape."""
    from ares_cli.training.zero3_init import param_shape

    decay = [p for p in model.parameters() if p.requires_grad and len(param_shape(p)) >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and len(param_shape(p)) < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def set_up(config, *, model_path, data_path, out_dir, log, progress) -> tuple[SFTRun, SFTState]:
    """Everything before the first optimiser step, and the loop state to start from (resumed when a
    checkpoint exists). Call on every rank."""
    import math
    import random

    import numpy as np
    import torch

    from ares_cli.models import freeze_vision_tower, load_model, load_processor, load_tokenizer
    from ares_cli.training import checkpoint, distributed
    from ares_cli.training.micro_batches import token_budget
    from ares_cli.training.offload import with_client_optimizer
    from ares_cli.training.sft_data import load_examples
    from ares_cli.training.zero3_init import load_partitioned_state, partitioned_loading

    dist = distributed.init_from_env()
    out_dir = Path(out_dir)
    log = log if dist.is_main else (lambda _msg: None)
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)

    # -- model, data, plan
    tokenizer = load_tokenizer(model_path)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    processor = load_processor(model_path, min_pixels=config.min_pixels, max_pixels=config.max_pixels)
    bf16 = config.dtype == "bf16" or (config.dtype == "auto" and dist.device.startswith("cuda"))
    n_micro = accumulation_steps(config, dist.world_size)
    ds_config = None
    if config.deepspeed:
        ds_config = distributed.deepspeed_config(config.deepspeed, micro_batch=config.micro_batch_size,
                                                 grad_accum=n_micro, world_size=dist.world_size,
                                                 grad_clip=config.grad_clip, bf16=bf16)  # fmt: skip
        ds_config = with_client_optimizer(ds_config, config.deepspeed)
    with partitioned_loading(ds_config) as partitioned:  # ZeRO-3: each rank builds only its partition
        model = load_model(model_path)
    frozen = freeze_vision_tower(model, train_merger=config.train_merger) if config.freeze_vision_tower else 0
    if config.gradient_checkpointing:
        enable = (
            getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        )
        enable()
    examples, counts = load_examples(Path(data_path), tokenizer, config.max_seq_len, processor=processor)
    steps_per_epoch = math.ceil(len(examples) / config.batch_size)
    total_steps = config.max_steps or config.epochs * steps_per_epoch
    budget = config.max_tokens_per_micro_batch
    micro_plan = (f"{n_micro} micro x {config.micro_batch_size}" if budget is None
                  else f"micro-batches of <= {token_budget(budget, [config.max_seq_len], config.micro_batch_size, dist.device)} tokens")  # fmt: skip
    log(
        f"sft: {len(examples)} examples ({counts['truncated']} truncated, {counts['dropped_no_response']} "
        f"dropped), {total_steps} steps of {config.batch_size} = {dist.world_size} rank(s) x {micro_plan}; "
        f"{frozen} frozen params; {'bf16' if bf16 else 'fp32'}"
    )

    # -- resume: weights go in before the optimizer (and ZeRO's fp32 partitions) are built from them
    loop = SFTState()
    resume_from = checkpoint.latest(out_dir / "checkpoints", log)  # the newest checkpoint whose files verify
    if resume_from is not None:
        model_state, opt_state, meta = checkpoint.load(resume_from, dist.rank)
        if meta["world_size"] != dist.world_size and config.deepspeed:
            raise UsageError(f"{resume_from} was written by {meta['world_size']} ranks; rerun with as many")
        if partitioned:
            load_partitioned_state(model, model_state)
        else:
            model.load_state_dict(model_state)
        loop = SFTState(meta["step"], meta["counters"])
        log(f"sft: resuming from {resume_from.name}")
    if not partitioned:  # zero.Init placed the partitions already
        model.to(dist.device)
    optimizer = torch.optim.AdamW(
        param_groups(model, config.weight_decay),
        lr=config.lr,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
    )
    engine = distributed.deepspeed_engine(model, optimizer, ds_config) if ds_config is not None else None
    if resume_from is not None:
        checkpoint.load_optimizer(engine, optimizer, opt_state)
    trainable = [p for p in model.parameters() if p.requires_grad]
    autocast = torch.autocast(
        "cuda", dtype=torch.bfloat16, enabled=bf16 and engine is None and dist.device.startswith("cuda")
    )
    model.train()
    run = SFTRun(config=config, dist=dist, out_dir=out_dir, log=log, progress=progress if dist.is_main else None,
                 tokenizer=tokenizer, processor=processor, pad_id=pad_id, model=model, frozen=frozen,
                 examples=examples, data_counts=counts, n_micro=n_micro, steps_per_epoch=steps_per_epoch,
                 total_steps=total_steps, optimizer=optimizer, engine=engine, trainable=trainable,
                 autocast=autocast)  # fmt: skip
    return run, loop


def save_checkpoint(run: SFTRun, loop: SFTState) -> None:
    """A collective checkpoint after ``loop.step`` optimiser steps (every rank calls it)."""
    from ares_cli.training import checkpoint, distributed

    dist = run.dist
    meta = {"step": loop.step, "world_size": dist.world_size, "counters": loop.counters}
    state = checkpoint.model_state(run.model, run.engine, dist)
    checkpoint.save(
        run.ckpt_root,
        loop.step,
        model_state=state,
        optimizer_state=checkpoint.optimizer_state(run.engine, run.optimizer),
        meta=meta,
        rank=dist.rank,
        barrier=distributed.barrier,
    )
