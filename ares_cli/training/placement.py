"""Where the RL trainer's frozen reference model lives, from ``kl.reference`` and the policy's ZeRO stage: a
rule the trainer (``training/rl/reference.py``) and ``ares plan`` (``planning/rl.py``) share."""

from __future__ import annotations


def reference_placement(kl_reference: str, policy_zero_stage: int) -> str:
    """``kl.reference`` resolved: device, cpu or zero3 (``auto``: zero3 under a ZeRO-3 policy, else device)."""
    if kl_reference == "auto":
        return "zero3" if policy_zero_stage == 3 else "device"
    return kl_reference
