"""The RL loop. Read :func:`train_rl` top to bottom:

set up (:mod:`.setup`): load the policy (+ frozen reference), resume from the latest checkpoint, build the
optimizer and the rollout backend -> for each step, :mod:`.phases`' functions in order:
  1. rollout: draw prompts, generate G responses each, grade, reward, dynamic sampling  (rollout.py, rewards.py)
  2. batch: pad this rank's groups; no-grad passes of the old policy (the log-probs and statistics the
     algorithm needs) and of the reference                                             (batch.py)
  3. reward -> advantage: hooks prepare -> rewards, the step's advantages, KL weights  (algos.py, rewards.py)
  4. update: PPO epochs x mini-batches x micro-batches, global-count normalisation     (update.py)
  5. controllers, weight sync (engines.py), one log line + a metrics row (step_metrics.py), validation,
     checkpoint (state.py)
-> save the final model with ``save_pretrained``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CODE_VERSION = "rl-1"


@dataclass
class RLResult:
    complete: bool
    stats: dict[str, Any] = field(default_factory=dict)


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
    prompt_lengths: list[int] | None = None,
) -> RLResult:
    """Train ``model_path`` with ``cfg.algo`` on ``problems``; checkpoints under ``out_dir/checkpoints``
    (resumed from automatically), metrics in ``out_dir/metrics.jsonl``, final model in ``out_dir/model``.
    Call on every rank; ``cfg.max_steps_this_run`` stops (checkpointed) early, for tests and time slots.
    ``report_to``: trackers beside ``metrics.jsonl`` (:mod:`ares_cli.training.tracking`); ``progress``: a
    :class:`ares_cli.console.Progress` advanced per step, showing the current phase; ``prompt_lengths``: each
    problem's prompt tokens as the preparation counted them (not encoded again)."""
    from ares_cli.grading import GradingPool
    from ares_cli.training.distributed import rank_share
    from ares_cli.training.rl import phases
    from ares_cli.training.rl.engines import sync_backend
    from ares_cli.training.rl.setup import set_up
    from ares_cli.training.rl.step_metrics import (
        ETA,
        Timer,
        add_to_counters,
        log_line,
        rank_mean,
        rollout_metrics,
        timing_metrics,
    )
    from ares_cli.training.tracking import MetricLog

    run, loop = set_up(cfg, model_path=model_path, problems=problems, val_problems=val_problems,
                       out_dir=out_dir, log=log, progress=progress, prompt_lengths=prompt_lengths)  # fmt: skip
    rows = MetricLog(run.out_dir, resumed_step=loop.step, is_main=run.dist.is_main, report_to=report_to,
                     config=dataclasses.asdict(cfg))  # fmt: skip
    stop = min(cfg.steps, cfg.max_steps_this_run or cfg.steps)

    workers = rank_share(cfg.grading.workers, run.dist.rank, run.dist.world_size)  # the run's, split
    with GradingPool(
        cfg.grading.grader, workers=workers, timeout_s=cfg.grading.timeout_s, trust_code=cfg.grading.trust_grader_code,
    ) as pool:  # fmt: skip
        if loop.step == 0 and val_problems and 0 not in rows:
            rows.write({"step": 0, **phases.validate(run, pool, loop, 0)})
        eta = ETA(loop.step, stop)
        run.show_progress(loop.step, total=stop)
        for step in range(loop.step, stop):
            timer = Timer(run.on_phase)

            # 1. rollout: generate, grade, reward, dynamic sampling
            groups, loop.cursor, filter_stats = phases.rollout(run, pool, loop.cursor, timer)

            # 2. this rank's batch; no-grad passes (old policy; reference)
            batch = phases.rank_batch(run, groups)
            with timer("forward"):
                phases.old_policy_pass(run, batch)
                phases.reference_pass(run, batch)

            # 3. the algorithm's rewards -> advantages, KL weights
            rewards, bonus, hook_metrics = phases.reward(run, batch)
            adv_metrics = phases.advantage(run, batch, rewards, bonus)

            # 4. policy update
            update_metrics, loop.opt_step = phases.update(
                run, batch, step=step, opt_step=loop.opt_step, timer=timer
            )

            # 5. controllers, weight sync, metrics, validation, checkpoint
            hook_metrics |= run.algo.after_step(batch)
            sync_backend(run.backend, run.model, run.gather)
            seconds = timer.elapsed()
            rollout_stats = rollout_metrics(
                groups, batch, rewards, adv_metrics, run.reduce, cfg.rollout.max_new_tokens
            )
            add_to_counters(loop.counters, rollout_stats["tokens"], timer)
            row = {"step": step + 1, **rollout_stats, **filter_stats, **update_metrics,
                   **rank_mean(hook_metrics, run.reduce, run.dist.world_size),
                   **timing_metrics(timer, seconds, rollout_stats["tokens"]), "cursor": loop.cursor}  # fmt: skip
            run.log(log_line(row, stop, eta.after(step)))
            run.show_progress(step + 1)
            if phases.validation_due(cfg, step + 1):
                row |= phases.validate(run, pool, loop, step + 1)
            rows.write(row)
            loop.step = step + 1
            if phases.checkpoint_due(cfg, loop.step, stop):
                phases.checkpoint(run, loop)
            if loop.step == stop and loop.step != cfg.steps:
                rows.close()
                return RLResult(False, {"steps": loop.step})

    rows.close()
    return finish(run, loop)


def finish(run, loop) -> RLResult:
    """Save the final model (the best validated one with ``val.select_by``) and the run's statistics."""
    from ares_cli.training import distributed
    from ares_cli.training.checkpoint import save_final
    from ares_cli.training.rl import state
    from ares_cli.training.rl.step_metrics import PHASES

    cfg, counters = run.cfg, loop.counters
    save_final(run.out_dir / "model", run.model, run.engine, run.processor or run.tokenizer, run.dist)
    selected = counters.get("best_step") if cfg.val.select_by != "last" else None
    if selected is not None:
        state.promote_best(run.out_dir, run.dist, keep_last=selected == cfg.steps)
    stats = {"steps": cfg.steps, "algo": cfg.algo, "tokens": counters["tokens"], "world_size": run.dist.world_size,
             "val_accuracy_initial": loop.val_accuracy.get(0), "val_accuracy_final": loop.val_accuracy.get(cfg.steps),
             "selected_step": selected or cfg.steps, "selected_score": counters.get("best_score"),
             "time_s": {p: round(counters[f"{p}_s"], 3) for p in PHASES},
             "deepspeed_zero_stage": distributed.zero_stage(run.engine)}  # fmt: skip
    return RLResult(True, stats)
