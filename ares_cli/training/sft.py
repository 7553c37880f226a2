"""Cold-start supervised fine-tuning (ARES appendix A): config, loss and the training loop.

Read :func:`train_sft` top to bottom: set up (:mod:`.sft_setup`: load, plan steps, resume, optimizer) → for
each optimiser step (this rank's micro-batches, the global token counts, set lr, forward + backward of
every micro-batch, reduce, clip, step, log, checkpoint) → save the final model.

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

from ares_cli.config import option, seed_option
from ares_cli.models.pixels import (
    MAX_PIXELS,
    MAX_PIXELS_HELP,
    MIN_PIXELS,
    MIN_PIXELS_HELP,
    check_pixel_bounds,
)

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
        4, "Sequences per forward/backward on one rank when max_tokens_per_micro_batch is null.", ge=1
    )
    max_tokens_per_micro_batch: int | Literal["auto"] | None = option(
        "auto",
        "Token budget per forward/backward (each rank's share sorted by length); auto = 2048 on CPU, "
        "max(2048, micro_batch_size x the longest row) on GPU; null = micro_batch_size rows.",
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
    seed: int = seed_option(0, "Seed of data order and RNG state.")
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
    min_pixels: int = option(MIN_PIXELS, MIN_PIXELS_HELP, ge=1)
    max_pixels: int = option(MAX_PIXELS, MAX_PIXELS_HELP, ge=1)
    deepspeed: str | None = option(
        None, "DeepSpeed ZeRO config (pipelines/deepspeed/zero2.json); None = torch."
    )

    def check(self) -> None:
        """The image resize bounds are ordered."""
        check_pixel_bounds(self.min_pixels, self.max_pixels)


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
    from ares_cli.training import distributed
    from ares_cli.training.sft_setup import save_checkpoint, set_up
    from ares_cli.training.tracking import MetricLog

    run, loop = set_up(config, model_path=model_path, data_path=data_path, out_dir=out_dir, log=log,
                       progress=progress)  # fmt: skip
    rows = MetricLog(run.out_dir, resumed_step=loop.step, is_main=run.dist.is_main, report_to=report_to,
                     config=dataclasses.asdict(config))  # fmt: skip
    run.show_progress(loop.step, total=run.total_steps)
    plan, start, t_start = StepPlan(run), loop.step, time.time()
    for step in range(loop.step, run.total_steps):
        t0 = time.time()
        epoch, local = plan.micro_batches(step)  # this rank's share of the step's batch
        n_response, n_tokens = global_counts(local)  # the loss is normalised by all ranks' response tokens
        lr = set_lr(run, lr_at(step, run.total_steps, config))
        loss_sum = accumulate_gradients(run, local, n_response)
        grad_norm = optimizer_step(run)
        loss = distributed.all_reduce_sum(loss_sum).item() / n_response

        dt = time.time() - t0
        done = loop.counters
        loop.counters = {
            "tokens": done["tokens"] + int(n_tokens),
            "response_tokens": done["response_tokens"] + int(n_response),
            "train_s": done["train_s"] + dt,
            "loss": loss,
        }
        eta = (time.time() - t_start) / (step + 1 - start) * (run.total_steps - step - 1)
        rows.write({"step": step + 1, "epoch": epoch, "loss": loss, "lr": lr, "grad_norm": float(grad_norm or 0),
                    "tokens": int(n_tokens), "response_tokens": int(n_response),
                    "tokens_per_s": n_tokens / max(dt, 1e-9), "time/step": round(dt, 4)})  # fmt: skip
        run.show_progress(step + 1)
        run.log(
            f"step {step + 1}/{run.total_steps} | loss {loss:.4f} | lr {lr:.3e} | grad {float(grad_norm or 0):.3f} "
            f"| tok/s {n_tokens / max(dt, 1e-9):,.0f} | eta {_fmt_eta(eta)}"
        )

        loop.step = step + 1
        last = loop.step == run.total_steps
        stopping = stop_after is not None and loop.step >= stop_after
        if not last and (stopping or (config.save_every and loop.step % config.save_every == 0)):
            save_checkpoint(run, loop)
        if stopping and not last:
            rows.close()
            return SFTResult(False, {"steps": loop.step})
    rows.close()
    return finish(run, loop)


# ---- the phases of one optimiser step ----------------------------------------------------------------
class StepPlan:
    """Which examples each optimiser step trains on: an epoch's batches (:func:`~.sft_data.epoch_batches`,
    deterministic in seed and epoch, built when the epoch begins) cut into this rank's micro-batches."""

    def __init__(self, run):
        self.run = run
        self.lengths = [len(ex.input_ids) for ex in run.examples]
        self.epoch, self.batches = None, []

    def micro_batches(self, step: int) -> tuple[int, list[list]]:
        """(epoch, this rank's micro-batches of examples) of optimiser step ``step``: ``n_micro`` row slices,
        or this rank's share planned by the token budget (as many micro-batches on every rank under
        DeepSpeed, whose ranks reduce in each backward)."""
        from ares_cli.training.micro_batches import equalise, plan_micro_batches
        from ares_cli.training.sft_data import epoch_batches, micro_batches

        run, config = self.run, self.run.config
        epoch, index = divmod(step, run.steps_per_epoch)
        if epoch != self.epoch:
            self.batches = epoch_batches(self.lengths, config.batch_size, config.seed, epoch, config.batching)
            self.epoch = epoch
        rank, world = run.dist.rank, run.dist.world_size
        if config.max_tokens_per_micro_batch is None:
            mine = micro_batches(self.batches[index], run.n_micro, rank, world)
        else:
            share = micro_batches(self.batches[index], 1, rank, world)[0]
            plan = plan_micro_batches([0] * len(share), [self.lengths[i] for i in share], rows=config.micro_batch_size,
                                      max_tokens=config.max_tokens_per_micro_batch,
                                      packed=config.batching == "packed", device=run.dist.device) or [[]]  # fmt: skip
            if run.engine is not None and world > 1:
                from ares_cli.training import distributed

                plan = equalise(plan, max(distributed.all_gather_json(len(plan))))
            mine = [[share[j] for j in part] for part in plan]
        return epoch, [[run.examples[i] for i in part] for part in mine]


def global_counts(local: list[list]) -> tuple[float, float]:
    """(response tokens, tokens) of the step over all ranks."""
    import torch

    from ares_cli.training import distributed

    counts = torch.tensor(
        [
            sum(ex.n_response for part in local for ex in part),
            sum(len(ex.input_ids) for part in local for ex in part),
        ],
        dtype=torch.float64,
    )
    n_response, n_tokens = distributed.all_reduce_sum(counts).tolist()
    return n_response, n_tokens


def set_lr(run, lr: float) -> float:
    """Set the learning rate of every parameter group (the schedule is a pure function of the step)."""
    for group in (run.engine.optimizer if run.engine is not None else run.optimizer).param_groups:
        group["lr"] = lr
    return lr


def accumulate_gradients(run, local: list[list], n_response: float):
    """Forward + backward of this rank's micro-batches, each loss divided by the step's response-token
    count; returns this rank's summed (undivided) loss."""
    import torch

    from ares_cli.models.vision import forward_inputs
    from ares_cli.training.sft_data import collate

    config, engine, device = run.config, run.engine, run.dist.device
    loss_sum = torch.zeros((), dtype=torch.float64)
    for i, part in enumerate(local):
        batch = collate(part, pad_id=run.pad_id, packed=config.batching == "packed", processor=run.processor)
        vision = batch.pop("vision", None)
        batch = {k: v.to(device) for k, v in batch.items()}
        if vision is not None:
            batch |= forward_inputs(run.model, batch["input_ids"], batch["attention_mask"], vision)
        with run.autocast:
            summed = micro_loss(run.forward, batch, config.stats_path)
        loss_sum += summed.detach().double().cpu()
        if engine is not None:  # DeepSpeed averages over ranks: undo it, and do not divide by accumulation
            engine.set_gradient_accumulation_boundary(i == len(local) - 1)
            engine.backward(summed * (run.dist.world_size / n_response), scale_wrt_gas=False)
            engine.step()
        else:
            (summed / n_response).backward()
    return loss_sum


def optimizer_step(run):
    """Sum gradients over ranks, clip, step (the torch path; DeepSpeed stepped inside the micro loop);
    returns the gradient norm."""
    import torch

    from ares_cli.training import distributed

    if run.engine is not None:
        return run.engine.get_global_grad_norm()
    distributed.all_reduce_grads_sum(run.trainable)
    grad_norm = torch.nn.utils.clip_grad_norm_(run.trainable, run.config.grad_clip or float("inf"))
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    return grad_norm


def finish(run, loop) -> SFTResult:
    """Save the final model and the run's statistics."""
    from ares_cli.training import checkpoint, distributed

    config, done = run.config, loop.counters
    checkpoint.save_final(
        run.out_dir / "model", run.model, run.engine, run.processor or run.tokenizer, run.dist
    )
    stats = {
        "steps": run.total_steps,
        "epochs": config.epochs,
        "examples": len(run.examples),
        **run.data_counts,
        "tokens": done["tokens"],
        "response_tokens": done["response_tokens"],
        "final_loss": done["loss"],
        "tokens_per_s": round(done["tokens"] / max(done["train_s"], 1e-9), 1),
        "train_s": round(done["train_s"], 3),
        "world_size": run.dist.world_size,
        "deepspeed_zero_stage": distributed.zero_stage(run.engine),
        "frozen_params": run.frozen,
    }
    return SFTResult(True, stats)
