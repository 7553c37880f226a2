"""Pure-torch RL algorithm core: token statistics, advantages, policy losses, aggregation and KL.

Every function here works on tensors only (no I/O, no global state besides the explicit registries in
``advantages.ADVANTAGES`` and ``policy_losses.POLICY_LOSSES``), so it can be unit-tested against
hand-computed values from the equations it cites.
"""
