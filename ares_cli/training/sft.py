"""Cold-start supervised fine-tuning (ARES appendix A): config, model setup and the training loop.

Read :func:`train_sft` top to bottom: load → plan steps → resume → for each optimiser step (set lr, run
this rank's micro-batches, reduce, clip, step, log, checkpoint) → save the final model.

Loss: summed token cross-entropy over response tokens divided by the response-token count of the whole
optimiser step (all ranks, all micro-batches), so any micro-batch / rank split gives the same gradient.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ares_cli.config import option
from ares_cli.errors import UsageError
from ares_cli.models.pixels import MAX_PIXELS, MIN_PIXELS

CODE_VERSION = "sft-1"


@dataclass
class SFTConfig:
    """Cold-start SFT; defaults follow the ARES paper (appendix A) where it states them."""

    epochs: int = option(2, "Passes over the SFT set (ARES: 2).", ge=1)
    lr: float = option(2e-5, "Peak AdamW learning rate (ARES: 2e-5).", gt=0.0)
    batch_size: int = option(
        256, "Global batch: sequences per optimiser step over all ranks (ARES: 256).", ge=1
    )
    micro_batch_size: int = option(
        4, "Sequences per forward/backward on one rank; accumulation is derived.", ge=1
    )
    max_seq_len: int | None = option(
        None,
        "Tokens per example; longer ones are truncated. Unset = ARES's 32k, capped at the model's context.",
        ge=2,
    )
    max_steps: int | None = option(
        None, "Optimiser steps to run (the schedule spans them); None = all epochs.", ge=1
    )
    scheduler: Literal["cosine", "constant"] = option(
        "cosine", "LR after warmup: cosine decay to 0, or constant."
    )
    warmup_ratio: float = option(
        0.03, "Fraction of steps with linear warmup (not stated in the paper).", ge=0.0, le=1.0
    )
    weight_decay: float = option(
        0.01, "AdamW weight decay on matrices (paper's RL value; SFT not stated).", ge=0.0
    )
    adam_beta1: float = option(0.9, "AdamW beta1.", ge=0.0, lt=1.0)
    adam_beta2: float = option(0.999, "AdamW beta2.", ge=0.0, lt=1.0)
    adam_eps: float = option(1e-8, "AdamW epsilon.", gt=0.0)
    grad_clip: float = option(1.0, "Clip the global gradient norm to this (0 = off).", ge=0.0)
    seed: int = option(0, "Seed of data order and RNG state.")
    gradient_checkpointing: bool = option(False, "Recompute activations in backward (memory for time).")
    dtype: Literal["auto", "fp32", "bf16"] = option("auto", "auto = bf16 on GPU, fp32 on CPU.")
    stats_path: Literal["fused", "logits"] = option(
        "fused", "Cross-entropy from hidden states in chunks (fused) or from full logits."
    )
    batching: Literal["length_grouped", "packed"] = option(
        "length_grouped", "Sort windows by length (little padding), or pack each micro-batch into one row."
    )
    save_every: int = option(
        100, "Checkpoint every N optimiser steps (0 = never); the last two are kept.", ge=0
    )
    freeze_vision_tower: bool = option(True, "Freeze params named visual/vision_tower/vision_model (ARES).")
    train_merger: bool = option(False, "With the tower frozen, still train its vision-to-language merger.")
    min_pixels: int = option(MIN_PIXELS, "Images with fewer pixels are upscaled (Qwen2.5-VL: 4*28*28).")
    max_pixels: int = option(MAX_PIXELS, "Images with more pixels are downscaled (Qwen2.5-VL: 16384*28*28).")
    deepspeed: str | None = option(
        None, "DeepSpeed ZeRO config (pipelines/deepspeed/zero2.json); None = torch."
    )


@dataclass
class SFTResult:
    complete: bool
    stats: dict[str, Any] = field(default_factory=dict)


# ---- pure helpers ------------------------------------------------------------------------------------
def lr_at(step: int, total: int, config: SFTConfig) -> float:
    """Learning rate of optimiser step ``step`` (0-based): linear warmup, then cosine to 0 or constant."""
    warmup = int(math.ceil(config.warmup_ratio * total))
    if step < warmup:
        return config.lr * (step + 1) / warmup
    if config.scheduler == "constant":
        return config.lr
    progress = (step - warmup) / max(1, total - warmup)
    return config.lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def accumulation_steps(config: SFTConfig, world_size: int) -> int:
    per_pass = config.micro_batch_size * world_size
    if config.batch_size % per_pass:
        raise UsageError(
            f"batch_size {config.batch_size} is not a multiple of micro_batch_size "
            f"{config.micro_batch_size} x {world_size} rank(s)"
        )
    return config.batch_size // per_pass


def param_groups(model, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on matrices, none on biases and norms; frozen parameters left out."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def micro_loss(model, batch: dict[str, Any], stats_path: str = "fused"):
    """Summed cross-entropy over labelled positions (labels are pre-shifted; only their positions are
    projected). ``fused``: -sum log p from the final hidden states through the model's own lm_head in
    chunks (:func:`~ares_cli.algorithms.token_stats.fused_token_stats`), no [tokens x V] logits in forward
    or backward; ``logits``: the model's logits and ``F.cross_entropy``."""
    import torch.nn.functional as F

    from ares_cli.training.sft_data import IGNORE

    labels = batch.pop("labels")
    keep = (labels != IGNORE).any(0).nonzero().squeeze(-1)
    keep = keep if keep.numel() else keep.new_zeros(1)
    targets = labels[:, keep]
    if stats_path == "logits":
        logits = model(**batch, logits_to_keep=keep, use_cache=False).logits.float()
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum")
    from ares_cli.algorithms.token_stats import fused_token_stats
    from ares_cli.models.heads import head_computes

    sel = targets != IGNORE

    def head(hidden, weight, bias):
        stats = fused_token_stats(hidden[sel], weight, targets[sel], bias=bias, stats=("logprob",))
        return -stats.logprob.sum().reshape(1)

    with head_computes(model, head):
        return model(**batch, logits_to_keep=keep, use_cache=False).logits.float().sum()


def _fmt_eta(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


# ---- the loop ----------------------------------------------------------------------------------------
def train_sft(
    config: SFTConfig,
    *,
    model_path: str | Path,
    data_path: str | Path,
    out_dir: str | Path,
    log: Callable[[str], None] = print,
    stop_after: int | None = None,
    report_to: tuple[str, ...] = ("jsonl",),
    progress=None,
) -> SFTResult:
    """Fine-tune ``model_path`` on ``data_path``; checkpoints in ``out_dir/checkpoints`` (resumed from
    automatically), final model + tokenizer in ``out_dir/model``. Call on every rank after
    :func:`distributed.init_from_env`. ``stop_after`` (a test hook) checkpoints and returns after that step.
    Each step's loss, learning rate, gradient norm and throughput go to ``out_dir/metrics.jsonl`` and the
    ``report_to`` trackers (:mod:`ares_cli.training.tracking`); ``progress`` (a :class:`ares_cli.console.Progress`)
    is advanced per step.
    """
    import random

    import numpy as np
    import torch

    from ares_cli.models import freeze_vision_tower, load_model, load_processor, load_tokenizer
    from ares_cli.models.vision import forward_inputs
    from ares_cli.training import checkpoint, distributed
    from ares_cli.training.sft_data import collate, epoch_batches, load_examples, micro_batches
    from ares_cli.training.tracking import MetricLog

    dist = distributed.init_from_env()
    out_dir, ckpt_root = Path(out_dir), Path(out_dir) / "checkpoints"
    log = log if dist.is_main else (lambda _msg: None)
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)

    # -- model, data, plan
    tokenizer = load_tokenizer(model_path)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    processor = load_processor(model_path, min_pixels=config.min_pixels, max_pixels=config.max_pixels)
    model = load_model(model_path)
    frozen = freeze_vision_tower(model, train_merger=config.train_merger) if config.freeze_vision_tower else 0
    if config.gradient_checkpointing:
        enable = (
            getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        )
        enable()
    bf16 = config.dtype == "bf16" or (config.dtype == "auto" and dist.device.startswith("cuda"))
    examples, counts = load_examples(Path(data_path), tokenizer, config.max_seq_len, processor=processor)
    lengths = [len(ex.input_ids) for ex in examples]
    n_micro = accumulation_steps(config, dist.world_size)
    steps_per_epoch = math.ceil(len(examples) / config.batch_size)
    total_steps = config.max_steps or config.epochs * steps_per_epoch
    log(
        f"sft: {len(examples)} examples ({counts['truncated']} truncated, {counts['dropped_no_response']} "
        f"dropped), {total_steps} steps of {config.batch_size} = {dist.world_size} rank(s) x {n_micro} micro "
        f"x {config.micro_batch_size}; {frozen} frozen params; {'bf16' if bf16 else 'fp32'}"
    )

    # -- resume: weights go in before the optimizer (and ZeRO's fp32 partitions) are built from them
    start_step, done = 0, {"tokens": 0, "response_tokens": 0, "train_s": 0.0, "loss": None}
    resume_from = checkpoint.latest(ckpt_root, log)  # the newest checkpoint whose files verify
    if resume_from is not None:
        model_state, opt_state, meta = checkpoint.load(resume_from, dist.rank)
        if meta["world_size"] != dist.world_size and config.deepspeed:
            raise UsageError(f"{resume_from} was written by {meta['world_size']} ranks; rerun with as many")
        model.load_state_dict(model_state)
        start_step, done = meta["step"], meta["counters"]
        log(f"sft: resuming from {resume_from.name}")
    model.to(dist.device)
    optimizer = torch.optim.AdamW(
        param_groups(model, config.weight_decay),
        lr=config.lr,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
    )
    engine = None
    if config.deepspeed:
        ds_config = distributed.deepspeed_config(
            config.deepspeed,
            micro_batch=config.micro_batch_size,
            grad_accum=n_micro,
            world_size=dist.world_size,
            grad_clip=config.grad_clip,
            bf16=bf16,
        )
        engine = distributed.deepspeed_engine(model, optimizer, ds_config)
    if resume_from is not None:
        checkpoint.load_optimizer(engine, optimizer, opt_state)
    trainable = [p for p in model.parameters() if p.requires_grad]
    autocast = torch.autocast(
        "cuda", dtype=torch.bfloat16, enabled=bf16 and engine is None and dist.device.startswith("cuda")
    )
    forward = engine if engine is not None else model
    model.train()

    # -- optimiser steps
    rows = MetricLog(out_dir, resumed_step=start_step, is_main=dist.is_main, report_to=report_to,
                     config=dataclasses.asdict(config))  # fmt: skip
    progress = progress if dist.is_main else None
    if progress is not None:
        progress.update(start_step, total=total_steps)
    t_start, batches_epoch, batches, loss = time.time(), None, [], float("nan")
    for step in range(start_step, total_steps):
        t0 = time.time()
        epoch, index = divmod(step, steps_per_epoch)
        if epoch != batches_epoch:
            batches, batches_epoch = (
                epoch_batches(lengths, config.batch_size, config.seed, epoch, config.batching),
                epoch,
            )
        mine = micro_batches(batches[index], n_micro, dist.rank, dist.world_size)
        local = [[examples[i] for i in part] for part in mine]
        counts_t = torch.tensor(
            [
                sum(ex.n_response for part in local for ex in part),
                sum(len(ex.input_ids) for part in local for ex in part),
            ],
            dtype=torch.float64,
        )
        n_response, n_tokens = distributed.all_reduce_sum(counts_t).tolist()
        lr = lr_at(step, total_steps, config)
        for group in (engine.optimizer if engine is not None else optimizer).param_groups:
            group["lr"] = lr

        loss_sum = torch.zeros((), dtype=torch.float64)
        for part in local:
            batch = collate(part, pad_id=pad_id, packed=config.batching == "packed", processor=processor)
            vision = batch.pop("vision", None)
            batch = {k: v.to(dist.device) for k, v in batch.items()}
            if vision is not None:
                batch |= forward_inputs(model, batch["input_ids"], batch["attention_mask"], vision)
            with autocast:
                summed = micro_loss(forward, batch, config.stats_path)
            loss_sum += summed.detach().double().cpu()
            if (
                engine is not None
            ):  # DeepSpeed averages over ranks: undo it, and do not divide by accumulation
                engine.backward(summed * (dist.world_size / n_response), scale_wrt_gas=False)
                engine.step()
            else:
                (summed / n_response).backward()
        if engine is not None:
            grad_norm = engine.get_global_grad_norm()
        else:
            distributed.all_reduce_grads_sum(trainable)
            grad_norm = torch.nn.utils.clip_grad_norm_(trainable, config.grad_clip or float("inf"))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        loss = distributed.all_reduce_sum(loss_sum).item() / n_response
        dt = time.time() - t0
        done = {
            "tokens": done["tokens"] + int(n_tokens),
            "response_tokens": done["response_tokens"] + int(n_response),
            "train_s": done["train_s"] + dt,
            "loss": loss,
        }
        eta = (time.time() - t_start) / (step + 1 - start_step) * (total_steps - step - 1)
        rows.write({"step": step + 1, "epoch": epoch, "loss": loss, "lr": lr, "grad_norm": float(grad_norm or 0),
                    "tokens": int(n_tokens), "response_tokens": int(n_response),
                    "tokens_per_s": n_tokens / max(dt, 1e-9), "time/step": round(dt, 4)})  # fmt: skip
        if progress is not None:
            progress.update(step + 1)
        log(
            f"step {step + 1}/{total_steps} | loss {loss:.4f} | lr {lr:.3e} | grad {float(grad_norm or 0):.3f} "
            f"| tok/s {n_tokens / max(dt, 1e-9):,.0f} | eta {_fmt_eta(eta)}"
        )

        last = step + 1 == total_steps
        stopping = stop_after is not None and step + 1 >= stop_after
        if not last and (stopping or (config.save_every and (step + 1) % config.save_every == 0)):
            _save_checkpoint(ckpt_root, step + 1, model, engine, optimizer, dist, done)
        if stopping and not last:
            rows.close()
            return SFTResult(False, {"steps": step + 1})
    rows.close()

    # -- final model
    checkpoint.save_final(out_dir / "model", model, engine, processor or tokenizer, dist)
    stats = {
        "steps": total_steps,
        "epochs": config.epochs,
        "examples": len(examples),
        **counts,
        "tokens": done["tokens"],
        "response_tokens": done["response_tokens"],
        "final_loss": done["loss"],
        "tokens_per_s": round(done["tokens"] / max(done["train_s"], 1e-9), 1),
        "train_s": round(done["train_s"], 3),
        "world_size": dist.world_size,
        "deepspeed_zero_stage": distributed.zero_stage(engine),
        "frozen_params": frozen,
    }
    return SFTResult(True, stats)


# ---- state in and out --------------------------------------------------------------------------------
def _save_checkpoint(root: Path, step: int, model, engine, optimizer, dist, counters: dict) -> None:
    from ares_cli.training import checkpoint, distributed

    meta = {"step": step, "world_size": dist.world_size, "counters": counters}
    state = checkpoint.model_state(model, engine, dist)
    checkpoint.save(
        root,
        step,
        model_state=state,
        optimizer_state=checkpoint.optimizer_state(engine, optimizer),
        meta=meta,
        rank=dist.rank,
        barrier=distributed.barrier,
    )
