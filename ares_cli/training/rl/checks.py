"""The RL run's own rules that its preparation (:mod:`ares_cli.stages.prepare_rl`) checks before any work
and the trainer applies again when it sets up: the batch split over ranks, branching against image
prompts, and the room a prompt has in the model's context."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ares_cli.errors import UsageError

if TYPE_CHECKING:
    from ares_cli.training.rl.config import RolloutConfig


def check_world_size(cfg, world_size: int) -> None:
    """Prompts per step and the optimiser mini-batch split evenly over the ranks (UsageError otherwise)."""
    if cfg.rollout.prompts_per_step % world_size or cfg.optim.mini_batch_size % world_size:
        raise UsageError(
            f"rollout.prompts_per_step {cfg.rollout.prompts_per_step} and optim.mini_batch_size "
            f"{cfg.optim.mini_batch_size} must be multiples of {world_size} ranks"
        )
    tp = cfg.rollout.tensor_parallel_size
    if world_size % tp:
        raise UsageError(f"rollout.tensor_parallel_size {tp} does not divide the {world_size} ranks")


def check_branching(rollout: RolloutConfig, problems: list[dict]) -> None:
    """``rollout.branching`` is refused for image prompts (UsageError); ``rollout`` is the config's section."""
    if rollout.branching.enabled and any(p.get("images") for p in problems):
        raise UsageError("rollout.branching does not support image prompts; turn it off for this data")


def prompt_token_limit(rollout: RolloutConfig, window: int | None) -> int:
    """The longest prompt the trainer keeps: ``rollout.max_prompt_tokens``, and no more than the room the
    response budget leaves in the model's ``window``-token context (``rollout``: the config's section)."""
    limit = rollout.max_prompt_tokens
    return min(limit, window - rollout.max_new_tokens) if window else limit
