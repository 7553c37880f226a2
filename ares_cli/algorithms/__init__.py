"""Pure RL algorithm core: token statistics, advantages, policy losses, aggregation, KL, AEPO, PAEC, AER, and
AdaCS cold-start curation.

Every function here works on tensors (or, in :mod:`.curation`, records) only: no I/O, no global state
besides the explicit registries in ``advantages.ADVANTAGES`` and ``policy_losses.POLICY_LOSSES``, so it can
be unit-tested against hand-computed values from the equations it cites. ``__all__`` lists the public
modules (each declares its own ``__all__``; ``docs/api.md``); importing this package loads none of them.
"""

__all__ = [
    "advantages", "aepo", "aepo_kl", "aepo_reward", "aer", "buckets", "controllers",
    "curation", "curation_records", "gspo", "kl", "loss_aggregation", "nucleus", "paec", "policy_loss_core", "policy_losses", "registry", "token_stats"
]  # fmt: skip
