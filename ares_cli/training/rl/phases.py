"""The phases of one RL step, in the order :func:`~.trainer.train_rl` calls them. Each reads the run's
fixed parts (:class:`~.setup.RLRun`) and returns what the next phase needs:

1. :func:`rollout`: draw prompts, generate G responses each, grade, reward, dynamic sampling (rollout.py,
   rewards.py); every rank gets every group;
2. :func:`rank_batch`: this rank's groups padded into one batch; :func:`old_policy_pass` and
   :func:`reference_pass`, the no-grad forwards (batch.py);
3. :func:`reward` and :func:`advantage`: the algorithm's hooks prepare -> rewards, the step's
   advantages, the algorithm's KL weights (algos.py, rewards.py);
4. :func:`update`: PPO epochs x mini-batches x micro-batches (update.py);
5. :func:`validate` and :func:`checkpoint` when due (state.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

    from ares_cli.training.rl.batch import RolloutBatch
    from ares_cli.training.rl.rollout import Group
    from ares_cli.training.rl.setup import LoopState, RLRun
    from ares_cli.training.rl.step_metrics import Timer


# -- 1. rollout --------------------------------------------------------------------------------------------
def rollout(run: RLRun, pool, cursor: int, timer: Timer) -> tuple[list[Group], int, dict[str, float]]:
    """The step's graded, rewarded groups, drawn from ``cursor`` on: this rank generates its share of each
    round's prompts, every rank sees all groups (so all take the same dynamic-sampling decisions).
    Returns (groups, the new cursor, filter / solve-rate / branching statistics)."""
    from ares_cli.training.rl.branching import branch_metrics, solve_rate_metrics
    from ares_cli.training.rl.engines import after_rollout, rollout_groups
    from ares_cli.training.rl.rollout import all_gather_groups, collect_groups, generate_groups
    from ares_cli.training.rl.step_metrics import TimedPool

    cfg, dist = run.cfg, run.dist
    share, shares = rollout_groups(cfg.rollout, dist)  # a tensor-parallel engine's ranks share their prompts

    def generate(draws):
        with timer("generate"), run.gather:
            mine = generate_groups(run.backend, run.tokenizer, draws[share::shares], cfg=cfg,
                                   seed=cfg.seed, pool=TimedPool(pool, timer),
                                   entropy_fn=lambda groups: rollout_entropies(run, groups), world=dist.world_size,
                                   processor=run.processor)  # fmt: skip
        return all_gather_groups(mine)

    groups, cursor, stats = collect_groups(run.sampler, cursor, generate=generate, cfg=cfg, log=run.log)
    after_rollout(run.backend)  # the engine sleeps through the passes and the update
    fracs = (cfg.aepo.easy_pass_frac, cfg.aepo.hard_pass_frac)
    stats |= solve_rate_metrics(groups, *fracs)
    if cfg.rollout.branching.enabled:
        stats |= branch_metrics(groups, *fracs)
    return groups, cursor, stats


def rollout_entropies(run: RLRun, groups: list[Group]) -> tuple[Tensor, Tensor]:
    """Token entropies of fresh rollouts under the policy and their response mask (no grad), for
    entropy-triggered branching."""
    from ares_cli.training.rl.batch import collate, rollout_pass

    cfg = run.cfg
    rows = collate(groups, run.pad_id, run.processor).to(run.dist.device)
    rollout_pass(run.engine or run.model, rows, stats=("entropy",), prefix="", micro=cfg.optim.micro_batch_size,
                 temperature=cfg.rollout.temperature, chunk_size=cfg.loss.chunk_size)  # fmt: skip
    return rows.tok.entropy, rows.response_mask


# -- 2. batch and the no-grad passes ---------------------------------------------------------------------
def rank_batch(run: RLRun, groups: list[Group]) -> RolloutBatch:
    """This rank's share of the groups, padded into one batch on its device, with each response's base
    reward (``seq.base_reward``) and correctness (``seq.correct``)."""
    import torch

    from ares_cli.training.rl.batch import collate

    dist = run.dist
    local = groups[dist.rank :: dist.world_size]
    batch = collate(local, run.pad_id, run.processor).to(dist.device)
    batch.seq.base_reward = torch.tensor([x for g in local for x in g.rewards], device=dist.device)
    batch.seq.correct = torch.tensor([c for g in local for c in g.correct], dtype=torch.float32,
                                        device=dist.device)  # fmt: skip
    batch.meta.tokenizer = run.tokenizer
    batch.meta.step_groups = len(groups)  # all ranks' (the same on every rank)
    return batch


def _pass_options(run: RLRun) -> dict:
    """How the no-grad passes compute: the rollout temperature, the algorithm's nucleus, the micro-batch
    plan of the update."""
    from ares_cli.training.micro_batches import budget_setting

    cfg = run.cfg
    top_p, top_k = run.algo.nucleus
    return dict(temperature=cfg.rollout.temperature, top_p=top_p, top_k=top_k, chunk_size=cfg.loss.chunk_size,
                micro=cfg.optim.micro_batch_size, max_tokens=budget_setting(cfg),
                packed=cfg.optim.pack_sequences, stats_path=cfg.optim.stats_path,
                world_size=run.dist.world_size)  # fmt: skip


def old_policy_pass(run: RLRun, batch: RolloutBatch) -> None:
    """No-grad pass of the policy that sampled the batch: ``batch.tok.old_<name>`` for each statistic
    of ``algo.rollout_stats()`` (the log-probs the importance ratio divides by, the entropies the step
    metrics and the algorithm's ``prepare`` read, ...). Skipped when the update is strictly on-policy
    (:func:`~.update.on_policy`): the training forward's own log-probs are θ_old's then."""
    from ares_cli.training.rl.batch import rollout_pass
    from ares_cli.training.rl.update import on_policy

    if on_policy(run.cfg.optim, run.algo, batch.meta.step_groups, run.dist.world_size):
        return
    rollout_pass(run.engine or run.model, batch, stats=run.algo.rollout_stats(), prefix="old_",
                 equal_counts=run.engine is not None, **_pass_options(run))  # fmt: skip


def reference_pass(run: RLRun, batch: RolloutBatch) -> None:
    """No-grad log-probs of the frozen reference, ``batch.tok.ref_logprob``, when there is one."""
    from ares_cli.training.rl.batch import rollout_pass
    from ares_cli.training.rl.reference import on_device

    if run.ref is None:
        return
    with on_device(run.ref, run.ref_placement, run.dist.device) as ref:  # sharded: same pass count per rank
        rollout_pass(ref, batch, stats=("logprob",), prefix="ref_", equal_counts=run.ref_placement == "zero3",
                     **_pass_options(run))  # fmt: skip


# -- 3. the algorithm's rewards and the advantages -------------------------------------------------------
def reward(run: RLRun, batch: RolloutBatch) -> tuple[Tensor, Tensor | None, dict[str, float]]:
    """The algorithm's ``prepare`` (detection, buckets, masks) and ``rewards`` hooks: (sequence rewards [N],
    per-token bonus [N, R] or None, their metrics)."""
    prepared = run.algo.prepare(batch)
    rewards, bonus, metrics = run.algo.rewards(batch)
    return rewards, bonus, {**prepared, **metrics}


def advantage(run: RLRun, batch: RolloutBatch, rewards: Tensor, bonus: Tensor | None) -> dict[str, float]:
    """Per-token advantages, ``batch.tok.advantages``: each sequence's reward's advantage
    (``loss.advantage``, :func:`~.rewards.step_advantages`) plus the token bonus; then the algorithm's
    per-token KL-loss weights, ``batch.tok.kl_weight`` (when it has any). Returns the advantage metrics."""
    from ares_cli.training.rl.rewards import step_advantages

    adv, metrics = step_advantages(run.cfg.loss, rewards, batch, run.reduce)
    token_adv = adv[:, None].expand_as(batch.response_mask)
    batch.tok.advantages = (token_adv + bonus) if bonus is not None else token_adv.contiguous()
    kl_weights = run.algo.kl_weights(batch)
    if kl_weights is not None:
        batch.tok.kl_weight = kl_weights
    return metrics


# -- 4. policy update -------------------------------------------------------------------------------------
def update(run: RLRun, batch: RolloutBatch, *, step: int, opt_step: int, timer: Timer):
    """All optimiser steps of RL step ``step``: (metrics, optimiser steps taken so far)."""
    from ares_cli.training.rl.update import ppo_update

    return ppo_update(run.model, run.engine, run.optimizer, batch, run.algo, run.cfg, step=step,
                      opt_step=opt_step, world_size=run.dist.world_size, reduce=run.reduce, timer=timer)  # fmt: skip


# -- 5. validation and checkpoints -----------------------------------------------------------------------
def validation_due(cfg, done: int) -> bool:
    """Validate after every ``val.every`` steps and after the last one."""
    return bool(cfg.val.every and done % cfg.val.every == 0) or done == cfg.steps


def validate(run: RLRun, pool, loop: LoopState, step: int) -> dict[str, float]:
    """Accuracy, pass@k and length on the held-out problems after ``step`` steps (all ranks share them);
    with ``val.select_by``, the best model so far is kept (:func:`~.state.keep_best`)."""
    import torch

    from ares_cli.training.rl import state
    from ares_cli.training.rl.engines import rollout_groups
    from ares_cli.training.rl.rollout import validate_accuracy

    cfg, dist = run.cfg, run.dist
    if not run.val_problems:
        return {}
    if run.progress is not None:
        run.progress.phase("validate")
    share, shares = rollout_groups(cfg.rollout, dist)
    with run.gather:
        local = validate_accuracy(run.backend, run.tokenizer, run.val_problems, cfg=cfg, pool=pool,
                                  rank=share, world=shares, processor=run.processor)  # fmt: skip
    keys = ("correct", "tokens", "truncated", "count", "solved", "problems")
    counted = dist.world_size // shares  # each tensor-parallel group's share is counted by all its ranks
    s = [
        x / counted for x in run.reduce(torch.tensor([local[k] for k in keys], dtype=torch.float64)).tolist()
    ]
    accuracy = loop.val_accuracy[step] = s[0] / max(s[3], 1)
    out = {"val/accuracy": accuracy, "val/pass_at_k": s[4] / max(s[5], 1),
           "val/response_len": s[1] / max(s[3], 1), "val/truncated_frac": s[2] / max(s[3], 1),
           "val/count": s[3]}  # fmt: skip
    run.log(
        f"val step {step} | accuracy {accuracy:.4f} | pass@{cfg.val.k} {out['val/pass_at_k']:.4f} "
        f"| len {out['val/response_len']:.1f}"
    )
    if cfg.val.select_by != "last" and step > 0:
        score = out["val/accuracy" if cfg.val.select_by == "accuracy" else "val/pass_at_k"]
        if state.keep_best(run.out_dir, step, score, loop.counters, model=run.model, engine=run.engine,
                           tokenizer=run.tokenizer, dist=dist):  # fmt: skip
            run.log(f"val step {step} | best so far by {cfg.val.select_by} ({score:.4f})")
    return out


def checkpoint_due(cfg, done: int, stop: int) -> bool:
    """Checkpoint every ``save_every`` steps and when this run stops early; never after the last step
    (the final model is saved instead)."""
    if done == cfg.steps:
        return False
    return done == stop or bool(cfg.save_every and done % cfg.save_every == 0)


def checkpoint(run: RLRun, loop: LoopState) -> None:
    """A collective checkpoint after ``loop.step`` steps (every rank calls it)."""
    from ares_cli.training.rl import state

    state.save(run.ckpt_root, loop.step, model=run.model, engine=run.engine, optimizer=run.optimizer,
               dist=run.dist, algo=run.algo, meta=loop.meta())  # fmt: skip
