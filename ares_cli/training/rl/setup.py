"""Set-up of an RL run: what stays fixed over its steps (:class:`RLRun`: models, optimizer, rollout backend,
algorithm) and what a checkpoint carries from one step to the next (:class:`LoopState`).

:func:`set_up` seeds every RNG, loads the policy (+ the frozen reference the algorithm may need), resumes
from the newest checkpoint that verifies (weights go in before the optimizer is built from them) and builds
the optimizer, the DeepSpeed engine and the rollout backend, in that order. Under ZeRO-3 the policy (and
a ``zero3`` reference) is built partitioned (:mod:`ares_cli.training.zero3_init`), never whole on a rank.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ares_cli.training.rl.step_metrics import PHASES

if TYPE_CHECKING:
    import torch
    from deepspeed import DeepSpeedEngine
    from transformers import PreTrainedTokenizerBase, ProcessorMixin

    from ares_cli.console import Progress
    from ares_cli.generation.types import Backend
    from ares_cli.training.distributed import DistInfo
    from ares_cli.training.rl.algos import Algorithm
    from ares_cli.training.rl.config import RLConfig
    from ares_cli.training.rl.rollout import PromptSampler


def _new_counters() -> dict[str, Any]:
    return {"tokens": 0, **{f"{p}_s": 0.0 for p in PHASES}}


@dataclass
class LoopState:
    """Where the loop stands: steps done, prompts drawn (the data cursor, dynamic-sampling rounds
    included), optimiser steps taken, and the running counters (tokens, seconds per phase, the best
    validated step and score). All of it but ``val_accuracy`` is checkpointed."""

    step: int = 0
    cursor: int = 0
    opt_step: int = 0
    counters: dict[str, Any] = field(default_factory=_new_counters)
    val_accuracy: dict[int, float] = field(default_factory=dict)  # by validated step, this process only

    def meta(self) -> dict[str, Any]:
        """What a checkpoint's ``state.json`` stores of the loop (:func:`~.state.save` adds the step)."""
        return {"cursor": self.cursor, "opt_step": self.opt_step, "counters": self.counters}


@dataclass
class RLRun:
    """The fixed parts of an RL run, built once by :func:`set_up` and read by every phase of a step."""

    cfg: RLConfig
    dist: DistInfo  # rank, world size, device
    out_dir: Path
    log: Callable[[str], None]  # silent on ranks other than the main one
    progress: Progress | None  # None on ranks other than the main one
    reduce: Callable[[torch.Tensor], torch.Tensor]  # sum of a tensor over ranks
    tokenizer: PreTrainedTokenizerBase
    processor: ProcessorMixin | None  # images -> pixels for a VL model; None for a text model
    pad_id: int
    algo: Algorithm  # the algorithm's hooks
    model: torch.nn.Module  # the policy
    ref: torch.nn.Module | None  # the frozen reference, or None when the algorithm needs none
    optimizer: torch.optim.Optimizer
    engine: DeepSpeedEngine | None  # None when training with torch alone
    backend: Backend  # rollout backend: the live policy (hf) or a weight-synced copy (vllm)
    gather: AbstractContextManager  # full parameters for generation under ZeRO-3 (a no-op context otherwise)
    sampler: PromptSampler
    val_problems: list[dict] | None
    ref_placement: str = "device"  # kl.reference resolved: device, cpu or zero3 (reference.py)

    @property
    def ckpt_root(self) -> Path:
        return self.out_dir / "checkpoints"

    @property
    def on_phase(self) -> Callable[[str], None] | None:
        """Told the name of each phase as it begins (the progress bar shows it)."""
        return self.progress.phase if self.progress is not None else None

    def show_progress(self, completed: int, total: int | None = None) -> None:
        """Advance the progress bar (if any) to ``completed`` steps, clearing the phase shown."""
        if self.progress is not None:
            self.progress.update(completed, total=total, phase="")


def set_up(cfg, *, model_path, problems, val_problems, out_dir, log, progress,
           prompt_lengths=None) -> tuple[RLRun, LoopState]:  # fmt: skip
    """Everything before the first step, and the loop state to start from (resumed when a checkpoint
    exists). Call on every rank; ``prompt_lengths`` (one per problem, as the preparation counted them)
    spares encoding every prompt again."""
    import random

    import numpy as np
    import torch

    from ares_cli.models import load_model, load_processor, load_tokenizer
    from ares_cli.models.budget import model_context
    from ares_cli.training import distributed
    from ares_cli.training.checkpoint import load_optimizer
    from ares_cli.training.rl import state
    from ares_cli.training.rl.checks import check_branching, check_world_size
    from ares_cli.training.rl.engines import (
        deepspeed_config_for,
        deepspeed_engine_for,
        gathered_for_generation,
        rollout_backend,
        sync_backend,
        training_dtype,
    )
    from ares_cli.training.rl.reference import load_reference
    from ares_cli.training.rl.registry import build_algorithm
    from ares_cli.training.rl.rollout import PromptSampler
    from ares_cli.training.sft_setup import param_groups
    from ares_cli.training.zero3_init import load_partitioned_state, partitioned_loading

    dist = distributed.init_from_env()
    log = log if dist.is_main else (lambda _msg: None)
    progress = progress if dist.is_main else None
    reduce = distributed.all_reduce_sum
    out_dir = Path(out_dir)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if cfg.rollout.max_new_tokens is None:  # a library caller's unset budget: the model's, else ARES's
        from ares_cli.training.rl.config import resolve_rollout_budget

        resolve_rollout_budget(cfg, model_path, model_context(model_path))
    r = cfg.rollout
    check_world_size(cfg, dist.world_size)  # the checks ``ares rl`` ran before it opened its artifact

    # -- models, data, algorithm
    tokenizer = load_tokenizer(model_path)
    processor = load_processor(model_path, min_pixels=r.min_pixels, max_pixels=r.max_pixels)
    check_branching(cfg.rollout, problems)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    problems = fitting_prompts(problems, tokenizer, r, log, processor, window=model_context(model_path),
                               lengths=prompt_lengths)  # fmt: skip
    algo = build_algorithm(cfg, reduce, distributed.all_gather_1d)
    # in the training dtype from the start: bf16 weights, not an fp32 copy that DeepSpeed casts later; under
    # ZeRO-3 each rank builds only its partition (zero3_init), never the whole model
    dtype = training_dtype(cfg.optim, dist)
    ds_config = deepspeed_config_for(cfg, dist)
    with partitioned_loading(ds_config) as partitioned:
        model = load_model(model_path, dtype=dtype)
    if cfg.optim.gradient_checkpointing:  # transformers 5 renamed it (the old name warns), as in sft.py
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()

    # -- resume (weights before the optimizer is built from them)
    loop = LoopState()
    resumed = state.load(out_dir / "checkpoints", dist, log)
    if resumed is not None:
        path, model_state, opt_state, meta = resumed
        if partitioned:
            load_partitioned_state(model, model_state)
        else:
            model.load_state_dict(model_state)
        state.restore_controllers(algo, meta)
        loop = LoopState(meta["step"], meta["cursor"], meta["opt_step"], meta["counters"])
        log(f"rl: resuming from {path.name} (cursor {loop.cursor})")
    (model if partitioned else model.to(dist.device)).eval()  # zero.Init placed the partitions already
    optimizer = torch.optim.AdamW(
        param_groups(model, cfg.optim.weight_decay),
        lr=cfg.optim.lr,
        betas=(cfg.optim.adam_beta1, cfg.optim.adam_beta2),
        eps=cfg.optim.adam_eps,
    )
    engine = deepspeed_engine_for(cfg, model, optimizer, dist)
    if resumed is not None:
        load_optimizer(engine, optimizer, opt_state)
    ref, ref_placement = (
        load_reference(
            cfg.kl,
            model_path,
            dist,
            dtype=dtype,
            policy_zero_stage=distributed.zero_stage(engine),
            policy_ds_config=ds_config,
        )  # fmt: skip
        if algo.needs_ref()
        else (None, "none")
    )
    log(
        f"rl: {cfg.algo} | {len(problems)} problems | {cfg.steps} steps x {r.prompts_per_step} prompts x "
        f"G={r.group_size} | {dist.world_size} rank(s) | reference model: {ref_placement}"
    )
    backend = rollout_backend(cfg, model, tokenizer, model_path, processor, problems + (val_problems or []),
                              device=dist.device)  # fmt: skip
    # the full-weights gather only where generation runs on the live policy (hf); vLLM syncs per parameter
    gather = (
        gathered_for_generation(model, engine) if getattr(backend, "model", None) is model else nullcontext()
    )
    if resumed is not None:
        sync_backend(backend, model, gather)
    run = RLRun(cfg=cfg, dist=dist, out_dir=out_dir, log=log, progress=progress, reduce=reduce,
                tokenizer=tokenizer, processor=processor, pad_id=pad_id, algo=algo, model=model, ref=ref,
                optimizer=optimizer, engine=engine, backend=backend, gather=gather,
                sampler=PromptSampler(problems, cfg.seed), val_problems=val_problems,
                ref_placement=ref_placement)  # fmt: skip
    return run, loop


def fitting_prompts(
    problems, tokenizer, rollout, log, processor=None, window=None, lengths=None
) -> list[dict]:
    """The problems whose rendered prompt fits ``rollout.max_prompt_tokens`` and the room the response
    budget leaves in the model's ``window``-token context (the others are dropped, and counted in the
    log); none fitting is an input error. ``rollout`` is the config's section; ``lengths``: the prompts'
    token counts when already known (one per problem), else each prompt is encoded here."""
    from ares_cli.errors import InputError
    from ares_cli.training.rl.checks import prompt_token_limit
    from ares_cli.training.rl.rollout import encode_prompts

    limit = prompt_token_limit(rollout, window)  # max_prompt_tokens, and the room the budget leaves
    if lengths is None or len(lengths) != len(problems):
        lengths = [len(ids) for ids in encode_prompts(tokenizer, problems, rollout, processor)]
    keep = [p for p, n in zip(problems, lengths, strict=True) if n <= limit]
    if len(keep) < len(problems):
        log(f"rl: dropped {len(problems) - len(keep)} prompts longer than {limit} tokens")
    if not keep:
        raise InputError("no training prompt fits rollout.max_prompt_tokens")
    return keep
