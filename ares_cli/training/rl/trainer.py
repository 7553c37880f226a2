"""The RL loop. Read :func:`train_rl` top to bottom:

load policy (+ frozen reference) -> resume from the latest checkpoint -> for each step:
  1. draw prompts, generate G responses each, grade, reward, dynamic sampling   (rollout.py, rewards.py)
  2. pad this rank's groups into a batch; no-grad pass of the policy (old log-probs and the statistics the
     algorithm needs) and of the reference                                     (batch.py)
  3. algorithm hooks: prepare -> rewards -> advantages -> KL weights          (algos.py)
  4. PPO epochs x mini-batches x micro-batches, global-count normalisation    (update.py)
  5. controllers, weight sync (engines.py), one log line + a metrics row, validation, checkpoint
-> save the final model with ``save_pretrained``.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CODE_VERSION = "rl-1"
PHASES = ("generate", "grade", "forward", "backward")


@dataclass
class RLResult:
    complete: bool
    stats: dict[str, Any] = field(default_factory=dict)


class Timer:
    """Seconds per phase within a step (``with timer("forward"): ...``); ``on_phase(name)`` is told when a
    phase begins (the progress bar shows it)."""

    def __init__(self, on_phase: Callable[[str], None] | None = None):
        self.seconds: dict[str, float] = defaultdict(float)
        self.on_phase = on_phase

    @contextmanager
    def __call__(self, name: str):
        if self.on_phase is not None:
            self.on_phase(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start


def train_rl(
    cfg,
    *,
    model_path: str | Path,
    problems: list[dict],
    val_problems: list[dict] | None,
    out_dir: str | Path,
    log: Callable[[str], None] = print,
    report_to: tuple[str, ...] = ("jsonl",),
    progress=None,
) -> RLResult:
    """Train ``model_path`` with ``cfg.algo`` on ``problems``; checkpoints under ``out_dir/checkpoints``
    (resumed from automatically), metrics in ``out_dir/metrics.jsonl``, final model in ``out_dir/model``.
    Call on every rank; ``cfg.max_steps_this_run`` stops (checkpointed) early, for tests and time slots.
    ``report_to``: trackers beside ``metrics.jsonl`` (:mod:`ares_cli.training.tracking`); ``progress``: a
    :class:`ares_cli.console.Progress` advanced per step, showing the current phase."""
    import random

    import numpy as np
    import torch

    from ares_cli.grading import GradingPool
    from ares_cli.models import load_model, load_processor, load_tokenizer
    from ares_cli.stages.budget import model_context
    from ares_cli.training import distributed
    from ares_cli.training.checkpoint import load_optimizer, save_final
    from ares_cli.training.rl import state
    from ares_cli.training.rl.batch import collate, rollout_pass
    from ares_cli.training.rl.branching import branch_metrics, solve_rate_metrics
    from ares_cli.training.rl.engines import (
        deepspeed_engine_for,
        gathered_for_generation,
        rollout_backend,
        sync_backend,
        training_dtype,
    )
    from ares_cli.training.rl.registry import build_algorithm
    from ares_cli.training.rl.rewards import step_advantages
    from ares_cli.training.rl.rollout import PromptSampler, all_gather_groups, collect_groups, generate_groups
    from ares_cli.training.rl.update import ppo_update
    from ares_cli.training.sft import param_groups
    from ares_cli.training.tracking import MetricLog

    dist = distributed.init_from_env()
    log = log if dist.is_main else (lambda _msg: None)
    progress = progress if dist.is_main else None
    reduce = distributed.all_reduce_sum
    out_dir, ckpt_root = Path(out_dir), Path(out_dir) / "checkpoints"
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if cfg.rollout.max_new_tokens is None:  # a library caller's unset budget: the model's, else ARES's
        from ares_cli.training.rl.config import resolve_rollout_budget

        resolve_rollout_budget(cfg, model_path, model_context(model_path))
    r, group = cfg.rollout, cfg.rollout.group_size
    if r.prompts_per_step % dist.world_size or cfg.optim.mini_batch_size % dist.world_size:
        from ares_cli.errors import UsageError

        raise UsageError(f"prompts_per_step and mini_batch_size must be multiples of {dist.world_size} ranks")

    # -- models, data, algorithm
    tokenizer = load_tokenizer(model_path)
    processor = load_processor(model_path, min_pixels=r.min_pixels, max_pixels=r.max_pixels)
    if r.branching.enabled and any(p.get("images") for p in problems):
        from ares_cli.errors import UsageError

        raise UsageError("rollout.branching does not support image prompts; turn it off for this data")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    problems = _fitting_prompts(problems, tokenizer, cfg, log, processor, window=model_context(model_path))
    algo = build_algorithm(cfg, reduce, distributed.all_gather_1d)
    model = load_model(model_path)
    if cfg.optim.gradient_checkpointing:  # transformers 5 renamed it (the old name warns), as in sft.py
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    ref_dtype = training_dtype(cfg, dist)
    ref = (
        load_model(model_path, dtype=ref_dtype).eval().requires_grad_(False).to(dist.device)
        if algo.needs_ref()
        else None
    )
    log(
        f"rl: {cfg.algo} | {len(problems)} problems | {cfg.steps} steps x {r.prompts_per_step} prompts x "
        f"G={group} | {dist.world_size} rank(s) | reference model: {'yes' if ref is not None else 'no'}"
    )

    # -- resume (weights before the optimizer is built from them)
    step0, cursor, opt_step, counters = 0, 0, 0, {"tokens": 0, **{f"{p}_s": 0.0 for p in PHASES}}
    resumed = state.load(ckpt_root, dist, log)
    if resumed is not None:
        path, model_state, opt_state, meta = resumed
        model.load_state_dict(model_state)
        state.restore_controllers(algo, meta)
        step0, cursor, opt_step, counters = meta["step"], meta["cursor"], meta["opt_step"], meta["counters"]
        log(f"rl: resuming from {path.name} (cursor {cursor})")
    model.to(dist.device).eval()
    optimizer = torch.optim.AdamW(
        param_groups(model, cfg.optim.weight_decay),
        lr=cfg.optim.lr,
        betas=(cfg.optim.adam_beta1, cfg.optim.adam_beta2),
        eps=cfg.optim.adam_eps,
    )
    engine = deepspeed_engine_for(cfg, model, optimizer, dist)
    if resumed is not None:
        load_optimizer(engine, optimizer, opt_state)
    backend = rollout_backend(cfg, model, tokenizer, model_path, processor, problems + (val_problems or []))
    gather = gathered_for_generation(model, engine)
    if resumed is not None:
        sync_backend(backend, model, gather)
    sampler = PromptSampler(problems, cfg.seed)

    def entropies(groups):  # token entropies of fresh rollouts, for entropy-triggered branching
        rows = collate(groups, pad_id, processor).to(dist.device)
        rollout_pass(engine or model, rows, stats=("entropy",), prefix="", micro=cfg.optim.micro_batch_size,
                     temperature=r.temperature, chunk_size=cfg.loss.chunk_size)  # fmt: skip
        return rows.tok["entropy"], rows.response_mask

    rows = MetricLog(out_dir, resumed_step=step0, is_main=dist.is_main, report_to=report_to,
                     config=dataclasses.asdict(cfg))  # fmt: skip
    stop = min(cfg.steps, cfg.max_steps_this_run or cfg.steps)
    val_acc: dict[int, float] = {}

    with GradingPool(
        cfg.grading.grader, workers=cfg.grading.workers, timeout_s=cfg.grading.timeout_s
    ) as pool:

        def validate(step: int) -> dict[str, float]:
            if not val_problems:
                return {}
            if progress is not None:
                progress.phase("validate")
            with gather:
                from ares_cli.training.rl.rollout import validate_accuracy

                local = validate_accuracy(backend, tokenizer, val_problems, cfg=cfg, pool=pool,
                                          rank=dist.rank, world=dist.world_size, processor=processor)  # fmt: skip
            keys = ("correct", "tokens", "truncated", "count", "solved", "problems")
            s = reduce(torch.tensor([local[k] for k in keys], dtype=torch.float64)).tolist()
            val_acc[step] = s[0] / max(s[3], 1)
            out = {"val/accuracy": val_acc[step], "val/pass_at_k": s[4] / max(s[5], 1),
                   "val/response_len": s[1] / max(s[3], 1), "val/truncated_frac": s[2] / max(s[3], 1),
                   "val/count": s[3]}  # fmt: skip
            log(
                f"val step {step} | accuracy {val_acc[step]:.4f} | pass@{cfg.val.k} {out['val/pass_at_k']:.4f} "
                f"| len {out['val/response_len']:.1f}"
            )
            if cfg.val.select_by != "last" and step > 0:
                score = out["val/accuracy" if cfg.val.select_by == "accuracy" else "val/pass_at_k"]
                if state.keep_best(out_dir, step, score, counters, model=model, engine=engine,
                                   tokenizer=tokenizer, dist=dist):  # fmt: skip
                    log(f"val step {step} | best so far by {cfg.val.select_by} ({score:.4f})")
            return out

        if step0 == 0 and val_problems and 0 not in rows:
            rows.write({"step": 0, **validate(0)})
        t_run = time.time()
        if progress is not None:
            progress.update(step0, total=stop, phase="")
        for step in range(step0, stop):
            timer, t0 = Timer(progress.phase if progress is not None else None), time.perf_counter()

            # 1. rollouts: this rank generates its share of the drawn prompts; every rank sees all groups
            def generate(draws, timer=timer):
                with timer("generate"), gather:
                    mine = generate_groups(backend, tokenizer, draws[dist.rank::dist.world_size], cfg=cfg,
                                           seed=cfg.seed, pool=_Timed(pool, timer), entropy_fn=entropies,
                                           world=dist.world_size, processor=processor)  # fmt: skip
                return all_gather_groups(mine)

            groups, cursor, filter_stats = collect_groups(
                sampler, cursor, generate=generate, cfg=cfg, log=log
            )
            fracs = (cfg.aepo.easy_pass_frac, cfg.aepo.hard_pass_frac)
            filter_stats |= solve_rate_metrics(groups, *fracs)
            if r.branching.enabled:
                filter_stats |= branch_metrics(groups, *fracs)
            local = groups[dist.rank :: dist.world_size]

            # 2. batch + no-grad passes (old policy; reference)
            batch = collate(local, pad_id, processor).to(dist.device)
            batch.seq["base_reward"] = torch.tensor([x for g in local for x in g.rewards], device=dist.device)
            batch.seq["correct"] = torch.tensor([c for g in local for c in g.correct], dtype=torch.float32,
                                                device=dist.device)  # fmt: skip
            batch.meta["tokenizer"] = tokenizer
            top_p, top_k = algo.nucleus
            kw = dict(
                temperature=r.temperature,
                top_p=top_p,
                top_k=top_k,
                chunk_size=cfg.loss.chunk_size,
                micro=cfg.optim.micro_batch_size,
                max_tokens=cfg.optim.max_tokens_per_micro_batch,
                packed=cfg.optim.pack_sequences,
                stats_path=cfg.optim.stats_path,
                world_size=dist.world_size,
            )
            with timer("forward"):
                rollout_pass(
                    engine or model,
                    batch,
                    stats=algo.rollout_stats(),
                    prefix="old_",
                    equal_counts=engine is not None,
                    **kw,
                )
                if ref is not None:
                    rollout_pass(ref, batch, stats=("logprob",), prefix="ref_", **kw)

            # 3. algorithm hooks -> rewards, advantages, KL weights
            alg_metrics = algo.prepare(batch)
            rewards, bonus, reward_metrics = algo.rewards(batch)
            adv, adv_metrics = step_advantages(cfg, rewards, batch, reduce)
            token_adv = adv[:, None].expand_as(batch.response_mask)
            batch.tok["advantages"] = (token_adv + bonus) if bonus is not None else token_adv.contiguous()
            kl_weights = algo.kl_weights(batch)
            if kl_weights is not None:
                batch.tok["kl_weight"] = kl_weights

            # 4. policy update
            update_metrics, opt_step = ppo_update(model, engine, optimizer, batch, algo, cfg, step=step,
                                                  opt_step=opt_step, world_size=dist.world_size,
                                                  reduce=reduce, timer=timer)  # fmt: skip

            # 5. controllers, weight sync, metrics, validation, checkpoint
            after_metrics = algo.after_step(batch)
            sync_backend(backend, model, gather)
            dt = time.perf_counter() - t0
            rollout_metrics = _rollout_metrics(groups, batch, rewards, adv_metrics, reduce, r.max_new_tokens)
            counters["tokens"] += int(rollout_metrics["tokens"])
            for p in PHASES:
                counters[f"{p}_s"] += timer.seconds[p]
            side = _rank_mean({**alg_metrics, **reward_metrics, **after_metrics}, reduce, dist.world_size)
            row = {"step": step + 1, **rollout_metrics, **filter_stats, **update_metrics, **side,
                   **{f"time/{p}": round(timer.seconds[p], 4) for p in PHASES}, "time/step": round(dt, 4),
                   "tokens_per_s": rollout_metrics["tokens"] / max(dt, 1e-9), "cursor": cursor}  # fmt: skip
            done = step + 1 - step0
            eta = (time.time() - t_run) / done * (stop - step - 1)
            log(_line(row, stop, eta))
            if progress is not None:
                progress.update(step + 1, phase="")
            last = step + 1 == cfg.steps
            if (cfg.val.every and (step + 1) % cfg.val.every == 0) or last:
                row |= validate(step + 1)
            rows.write(row)
            stopping = step + 1 == stop and not last
            if not last and (stopping or (cfg.save_every and (step + 1) % cfg.save_every == 0)):
                state.save(
                    ckpt_root,
                    step + 1,
                    model=model,
                    engine=engine,
                    optimizer=optimizer,
                    dist=dist,
                    algo=algo,
                    meta={"cursor": cursor, "opt_step": opt_step, "counters": counters},
                )
            if stopping:
                rows.close()
                return RLResult(False, {"steps": step + 1})

    # -- final model
    rows.close()
    save_final(out_dir / "model", model, engine, processor or tokenizer, dist)
    selected = counters.get("best_step") if cfg.val.select_by != "last" else None
    if selected is not None:
        state.promote_best(out_dir, dist, keep_last=selected == cfg.steps)
    first, final = val_acc.get(0), val_acc.get(cfg.steps)
    stats = {"steps": cfg.steps, "algo": cfg.algo, "tokens": counters["tokens"], "world_size": dist.world_size,
             "val_accuracy_initial": first, "val_accuracy_final": final, "selected_step": selected or cfg.steps,
             "selected_score": counters.get("best_score"),
             "time_s": {p: round(counters[f"{p}_s"], 3) for p in PHASES},
             "deepspeed_zero_stage": distributed.zero_stage(engine)}  # fmt: skip
    return RLResult(True, stats)


# ---- helpers -----------------------------------------------------------------------------------------
def _fitting_prompts(problems, tokenizer, cfg, log, processor=None, window=None):
    from ares_cli.errors import InputError
    from ares_cli.training.rl.rollout import encode_prompts

    limit = cfg.rollout.max_prompt_tokens  # and the room the response budget leaves in the context
    limit = min(limit, window - cfg.rollout.max_new_tokens) if window else limit
    lengths = [len(ids) for ids in encode_prompts(tokenizer, problems, cfg.rollout, processor)]
    keep = [p for p, n in zip(problems, lengths, strict=True) if n <= limit]
    if len(keep) < len(problems):
        log(f"rl: dropped {len(problems) - len(keep)} prompts longer than {limit} tokens")
    if not keep:
        raise InputError("no training prompt fits rollout.max_prompt_tokens")
    return keep


class _Timed:
    """A grading pool whose ``grade`` calls are charged to the step's "grade" phase (not "generate")."""

    def __init__(self, pool, timer):
        self.pool, self.timer = pool, timer

    def grade(self, items):
        if self.timer.on_phase is not None:
            self.timer.on_phase("grade")
        start = time.perf_counter()
        try:
            return self.pool.grade(items)
        finally:
            spent = time.perf_counter() - start
            self.timer.seconds["grade"] += spent
            self.timer.seconds["generate"] -= spent
            if self.timer.on_phase is not None:
                self.timer.on_phase("generate")


def _rollout_metrics(groups, batch, rewards, adv_metrics, reduce, budget) -> dict[str, float]:
    """Global rollout statistics: all groups are on every rank; the batch-side ones are reduced."""
    import torch

    lengths = [len(ids) for g in groups for ids in g.response_ids]
    prompt_tokens = sum(len(g.prompt_ids) * len(g.response_ids) for g in groups)
    mask, n_groups = batch.response_mask, adv_metrics["num_groups"]
    local = torch.tensor([
        float(rewards.float().sum()), float(len(rewards)), float((batch.tok["old_entropy"] * mask).sum()),
        float(mask.sum()), adv_metrics["zero_variance_group_frac"] * n_groups, n_groups,
    ], dtype=torch.float64)  # fmt: skip
    s = reduce(local).tolist()
    return {
        "reward": s[0] / max(s[1], 1),
        "reward_base": sum(x for g in groups for x in g.rewards) / max(len(lengths), 1),
        "accuracy": sum(c for g in groups for c in g.correct) / max(len(lengths), 1),
        "response_len": sum(lengths) / max(len(lengths), 1),
        "response_len_max": float(max(lengths, default=0)),
        "truncated_frac": sum(f == "length" for g in groups for f in g.finish) / max(len(lengths), 1),
        "entropy": s[2] / max(s[3], 1),
        "zero_variance_group_frac": s[4] / max(s[5], 1),
        "tokens": float(sum(lengths) + prompt_tokens),
    }


def _rank_mean(metrics: dict[str, float], reduce, world: int) -> dict[str, float]:
    import torch

    from ares_cli.training import distributed

    keys = distributed.broadcast_json(sorted(metrics))
    if not keys:
        return {}
    values = reduce(torch.tensor([float(metrics.get(k, 0.0)) for k in keys], dtype=torch.float64)) / world
    return dict(zip(keys, values.tolist(), strict=True))


def _line(row: dict[str, Any], total: int, eta: float) -> str:
    eta_s = int(max(eta, 0))
    kl = row.get("kl_k3", row.get("kl_k1", row.get("kl_k2", row.get("approx_kl_k3", 0.0))))
    return (
        f"step {row['step']}/{total} | reward {row['reward']:.3f} | acc {row['accuracy']:.3f} | "
        f"len {row['response_len']:.0f} | ent {row['entropy']:.3f} | kl {kl:.2e} | "
        f"clip {row.get('clipfrac_low', 0):.3f}/{row.get('clipfrac_high', 0):.3f} | "
        f"loss {row.get('loss', 0):.4f} | tok/s {row['tokens_per_s']:,.0f} | "
        f"gen {row['time/generate']:.1f}s grade {row['time/grade']:.1f}s fwd {row['time/forward']:.1f}s "
        f"bwd {row['time/backward']:.1f}s | eta {eta_s // 3600}:{eta_s % 3600 // 60:02d}:{eta_s % 60:02d}"
    )
