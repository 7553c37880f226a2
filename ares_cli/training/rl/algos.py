"""The hook interface every RL algorithm implements, and the registry of algorithms by name.

The trainer calls, per step and in this order (it never asks which algorithm it runs)::

    rollout_stats() / train_stats()      which token statistics the no-grad and the loss forwards compute
    reads_old_stats                      whether a hook reads the no-grad pass's statistics (old_*)
    needs_ref()                          whether a frozen reference model is needed
    prepare(batch)                       after the no-grad pass: detection, buckets, masks (may all-reduce)
    rewards(batch)                       -> (seq_rewards [N], token_bonus [N, T] | None, metrics)
    kl_weights(batch)                    -> per-token KL-loss weights [N, T] | None (1 everywhere)
    minibatch_start(mb)                  before each optimiser step's micro-batches (may all-reduce)
    extra_loss(micro, stats)             -> (scalar | None, metrics), added to the policy + KL loss
    controllers()                        -> {name: object with state_dict / load_state_dict}
    after_step(batch)                    -> metrics; controller updates from global statistics

GRPO, DAPO, Dr.GRPO, CISPO, Clip-Cov, KL-Cov, GSPO, GSPO-token, global entropy and 80/20 top-entropy use
this base class: they differ only in configuration (their presets in :mod:`.registry`). AEPO, PAEC and AER
override hooks (:mod:`.algos_aepo`, :mod:`.algos_paec`, :mod:`.algos_aer`); the names live in :mod:`.registry`,
which sits above all of them (imports run registry -> members -> this module). ``reduce`` is a sum across ranks and
``gather`` a concatenation of 1-D tensors across ranks (identities in one process); every statistic that
drives a decision goes through one of them, so 1 and N processes make the same decisions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

Reduce = Callable[[Tensor], Tensor]


class Algorithm:
    """Default hooks: outcome rewards, uniform KL weights, no extra loss, no controllers."""

    def __init__(self, cfg, reduce: Reduce, gather: Reduce | None = None):
        self.cfg, self.reduce = cfg, reduce
        self.gather = gather if gather is not None else (lambda t: t)

    # -- what to compute ---------------------------------------------------------------------------
    def rollout_stats(self) -> tuple[str, ...]:
        return ("logprob", "entropy")

    def train_stats(self) -> tuple[str, ...]:
        return ("logprob", "entropy")

    #: Whether ``prepare`` / ``rewards`` / ``kl_weights`` / ``minibatch_start`` / ``extra_loss`` /
    #: ``after_step`` read the no-grad pass's ``old_*`` statistics. When none does, a strictly on-policy
    #: update takes its θ_old log-probs from the training forward, detached (:func:`~.update.on_policy`).
    reads_old_stats: bool = False

    @property
    def entropy_grad(self) -> bool:
        return self.cfg.loss.entropy_coef != 0

    @property
    def nucleus(self) -> tuple[float, int]:
        """(top_p, top_k) of the nucleus statistics, when requested."""
        return 0.85, 10000

    def needs_ref(self) -> bool:
        return self.cfg.kl.coef > 0

    def policy_loss_config(self):
        """The loss constants: ``cfg.loss`` itself (a :class:`~ares_cli.algorithms.policy_loss_core.PolicyLossConfig`)."""
        return self.cfg.loss

    # -- per step ----------------------------------------------------------------------------------
    def prepare(self, batch) -> dict[str, float]:
        return {}

    def rewards(self, batch) -> tuple[Tensor, Tensor | None, dict[str, float]]:
        return batch.seq.base_reward, None, {}

    def kl_weights(self, batch) -> Tensor | None:
        return None

    def minibatch_start(self, mb) -> None:
        return None

    def extra_loss(self, micro, stats) -> tuple[Tensor | None, dict[str, float]]:
        return None, {}

    def controllers(self) -> dict[str, Any]:
        return {}

    def after_step(self, batch) -> dict[str, float]:
        return {}


def group_correct(batch) -> tuple[Tensor, Tensor]:
    """Per response: its group's number of correct responses and the group size (local groups are whole)."""
    g = batch.group
    n_groups = int(g.max()) + 1 if len(g) else 0
    correct = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, g, batch.seq.correct.double())
    size = torch.zeros(n_groups, dtype=torch.float64).index_add_(
        0, g, torch.ones_like(g, dtype=torch.float64)
    )
    return correct[g].long(), size[g].long()
