"""The policy update of one RL step: PPO epochs over mini-batches (one optimiser step each), each mini-batch
split into micro-batches whose gradients accumulate.

Every loss is normalised by the GLOBAL token / sequence counts of its optimiser step (all micro-batches,
all ranks; :class:`~ares_cli.algorithms.loss_aggregation.Aggregation`), and rank gradients are *summed*, so
the gradient does not depend on the micro-batch size or the number of ranks. Exceptions by design: the
per-call statistics of Clip-Cov / KL-Cov (covariance means, the random selection) and of the 80/20
top-entropy threshold are taken over each micro-batch, as in the papers' per-batch formulation.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from ares_cli.training.rl.batch import forward_stats, micro_plan

SUMMED = ("pg_loss", "kl_loss", "loss")  # partial sums over micro-batches, not means


class MetricMeans:
    """Token-weighted means (and plain sums for SUMMED keys) of micro-batch metrics, reduced over ranks."""

    def __init__(self):
        self.sums, self.weights = defaultdict(float), defaultdict(float)

    def add(self, metrics: dict[str, float], weight: float) -> None:
        for key, value in metrics.items():
            if key in SUMMED:
                self.sums[key] += float(value)
                self.weights[key] = 1.0
            else:
                self.sums[key] += float(value) * weight
                self.weights[key] += weight

    def reduce(self, reduce, *, updates: int = 1) -> dict[str, float]:
        from ares_cli.training import distributed

        keys = distributed.broadcast_json(sorted(self.sums))
        if not keys:
            return {}
        flat = torch.tensor(
            [[self.sums.get(k, 0.0), self.weights.get(k, 0.0)] for k in keys], dtype=torch.float64
        )
        flat = reduce(flat)
        out = {}
        for key, (total, weight) in zip(keys, flat.tolist(), strict=True):
            out[key] = total / max(updates, 1) if key in SUMMED else (total / weight if weight else 0.0)
        return out


def lr_at(opt_step: int, optim) -> float:
    """Constant learning rate after an optional linear warmup (ARES: no warmup); ``optim``: the config's section."""
    warm = optim.warmup_steps
    return optim.lr * min(1.0, (opt_step + 1) / warm) if warm else optim.lr


def on_policy(optim, algo, step_groups: int, world_size: int) -> bool:
    """Whether the step's update is strictly on-policy, so that θ_old = θ and the old log-probs are the
    training forward's own, detached (no separate no-grad pass): one PPO epoch, one optimiser step (the
    step's ``step_groups`` prompts fit one mini-batch on every rank), and no hook that reads the no-grad
    pass's statistics (``algo.reads_old_stats``: AEPO, PAEC, AER). The step's entropy metric then comes
    from the training forward as well. The sampler (hf or vLLM) does not enter: the ratio's denominator
    is always the trainer's own log-prob, never the sampler's (there is no sampler-side correction).
    ``optim`` is the config's section."""
    per_rank = -(-step_groups // world_size)
    return (
        optim.ppo_epochs == 1
        and per_rank <= optim.mini_batch_size // world_size
        and not algo.reads_old_stats
        and "entropy" in algo.train_stats()
    )


def minibatch_backward(
    forward,
    mb,
    algo,
    cfg,
    *,
    world_size: int,
    reduce,
    engine=None,
    generator=None,
    timer=None,
    means: MetricMeans | None = None,
) -> MetricMeans:
    """Forward + backward of every micro-batch of one mini-batch; gradients accumulate in the model.
    Without ``old_logprob`` in ``mb`` (an on-policy step, :func:`on_policy`), each micro-batch's θ_old
    log-probs are its own forward's, detached, and its entropies fill ``mb.tok.old_entropy``."""
    from ares_cli.algorithms.loss_aggregation import Aggregation, local_counts
    from ares_cli.training.micro_batches import budget_setting

    means = means if means is not None else MetricMeans()
    timer = timer if timer is not None else _NoTimer()
    counts = local_counts(mb.response_mask)
    total = reduce(torch.tensor([counts["tokens"], counts["sequences"]], dtype=torch.float64))
    agg = Aggregation(
        cfg.loss.aggregation, float(total[0]), float(total[1]), max_length=cfg.rollout.max_new_tokens
    )
    algo.minibatch_start(mb)
    top_p, top_k = algo.nucleus
    pl_cfg = algo.policy_loss_config()
    o = cfg.optim
    plan = micro_plan(mb, rows=o.micro_batch_size, max_tokens=budget_setting(cfg),
                      packed=o.pack_sequences, world_size=world_size, equal_counts=engine is not None)  # fmt: skip
    for i, idx in enumerate(plan):
        micro = mb.rows(torch.tensor(idx or [0], dtype=torch.long))
        mask = micro.response_mask
        with timer("forward"):
            stats = forward_stats(forward, micro, stats=algo.train_stats(), temperature=cfg.rollout.temperature,
                                  top_p=top_p, top_k=top_k, chunk_size=cfg.loss.chunk_size,
                                  entropy_grad=algo.entropy_grad, stats_path=o.stats_path,
                                  packed=o.pack_sequences)  # fmt: skip
            if not idx:  # an equalising pass (DeepSpeed ranks step together): no gradient, no metrics
                loss, metrics = stats.logprob.sum() * 0.0, {}
            else:
                if micro.tok.old_logprob is None:  # on-policy: θ_old is this very forward, detached
                    micro.tok.old_logprob = stats.logprob.detach()
                    mb.tok.old_entropy[idx, : mask.shape[1]] = stats.entropy.detach()
                loss, metrics = _micro_loss(stats, micro, algo, cfg, agg, pl_cfg, generator)
        with timer("backward"):
            if engine is not None:  # DeepSpeed averages over ranks: undo it; do not divide by accumulation
                engine.set_gradient_accumulation_boundary(i == len(plan) - 1)
                engine.backward(loss * world_size, scale_wrt_gas=False)
                engine.step()
            else:
                loss.backward()
        if idx:
            means.add(metrics, weight=float(mask.sum()))
    return means


def _micro_loss(stats, micro, algo, cfg, agg, pl_cfg, generator):
    """Policy loss + KL to the reference + the algorithm's extra term of one micro-batch, and its metrics."""
    from ares_cli.algorithms.kl import kl_loss
    from ares_cli.algorithms.policy_losses import LossExtras, policy_loss

    mask = micro.response_mask
    loss, metrics = policy_loss(cfg.loss.policy_loss, stats.logprob, micro.tok.old_logprob,
                                micro.tok.advantages, mask, config=pl_cfg, aggregation=agg,
                                extras=LossExtras(entropy=stats.entropy, generator=generator))  # fmt: skip
    if micro.tok.ref_logprob is not None:
        kl, kl_metrics = kl_loss(stats.logprob, micro.tok.ref_logprob, mask, aggregation=agg,
                                 kind=cfg.kl.estimator, coef=cfg.kl.coef, weights=micro.tok.kl_weight,
                                 clamp=cfg.kl.clamp, log_ratio_clamp=cfg.kl.log_ratio_clamp)  # fmt: skip
        loss, metrics = loss + kl, metrics | kl_metrics
    metrics["loss"] = float(loss.detach())  # policy + KL; the algorithm logs its extra term itself
    extra, extra_metrics = algo.extra_loss(micro, stats)
    if extra is not None:
        loss, metrics = loss + extra, metrics | extra_metrics
    return loss, metrics


def optimizer_step(model, engine, optimizer, optim) -> float:
    """Sum gradients over ranks, clip at ``optim.grad_clip``, step (the torch path; DeepSpeed stepped inside
    the micro loop)."""
    from ares_cli.training import distributed

    if engine is not None:
        return float(engine.get_global_grad_norm() or 0.0)
    trainable = [p for p in model.parameters() if p.requires_grad]
    distributed.all_reduce_grads_sum(trainable)
    norm = torch.nn.utils.clip_grad_norm_(trainable, optim.grad_clip or float("inf"))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(norm)


def prompt_slices(group: torch.Tensor, prompts: int) -> list[slice]:
    """Row slices of consecutive mini-batches of ``prompts`` groups each (rows are ordered by group; a group
    may hold more than G rows when rollouts were branched)."""
    ids = group.tolist()
    starts = [i for i in range(len(ids)) if i == 0 or ids[i] != ids[i - 1]][::prompts]
    return [slice(a, b) for a, b in zip(starts, [*starts[1:], len(ids)], strict=True)]


def ppo_update(
    model, engine, optimizer, batch, algo, cfg, *, step: int, opt_step: int, world_size: int, reduce, timer
) -> tuple[dict[str, float], int]:
    """All optimiser steps of one RL step; returns (metrics, optimiser steps taken so far)."""
    mb_prompts = cfg.optim.mini_batch_size // world_size
    generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    forward = engine if engine is not None else model
    means, norms, updates = MetricMeans(), [], 0
    if batch.tok.old_logprob is None:  # on-policy: the training forward fills the step's entropies
        batch.tok.old_entropy = torch.zeros_like(batch.response_mask)
    model.train()
    for _epoch in range(cfg.optim.ppo_epochs):
        for rows in prompt_slices(batch.group, mb_prompts):
            for group_ in (engine.optimizer if engine is not None else optimizer).param_groups:
                group_["lr"] = lr_at(opt_step, cfg.optim)
            minibatch_backward(forward, batch.rows(rows), algo, cfg,
                               world_size=world_size, reduce=reduce, engine=engine, generator=generator,
                               timer=timer, means=means)  # fmt: skip
            with timer("backward"):
                norms.append(optimizer_step(model, engine, optimizer, cfg.optim))
            opt_step, updates = opt_step + 1, updates + 1
    model.eval()
    metrics = means.reduce(reduce, updates=updates)
    metrics |= {
        "grad_norm": sum(norms) / len(norms),
        "lr": lr_at(opt_step - 1, cfg.optim),
        "updates": float(updates),
    }
    return metrics, opt_step


class _NoTimer:
    def __call__(self, _name):
        from contextlib import nullcontext

        return nullcontext()
