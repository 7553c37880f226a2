"""The RL run's own rules (``training/rl/checks.py``), each taking the config section it reads."""

from __future__ import annotations

import pytest

from ares_cli.errors import UsageError
from ares_cli.training.rl.checks import check_branching, check_world_size, prompt_token_limit
from ares_cli.training.rl.config import resolve_rl_config


def test_the_prompt_room_is_the_context_less_the_response_budget():
    rollout = resolve_rl_config(sets=["rollout.max_prompt_tokens=128", "rollout.max_new_tokens=400"]).rollout
    assert prompt_token_limit(rollout, None) == 128  # no known context: the configured limit
    assert prompt_token_limit(rollout, 640) == 128
    assert prompt_token_limit(rollout, 500) == 100


def test_branching_is_refused_for_image_prompts_only():
    rollout = resolve_rl_config(sets=["rollout.branching.enabled=true"]).rollout
    check_branching(rollout, [{"id": "a", "problem": "1+1"}])
    with pytest.raises(UsageError, match="image prompts"):
        check_branching(rollout, [{"id": "a", "problem": "1+1"}, {"id": "b", "images": ["x.png"]}])
    check_branching(resolve_rl_config().rollout, [{"id": "b", "images": ["x.png"]}])  # off: nothing to refuse


def test_the_batch_must_split_evenly_over_the_ranks():
    cfg = resolve_rl_config(sets=["rollout.prompts_per_step=8", "optim.mini_batch_size=4"])
    check_world_size(cfg, 4)
    with pytest.raises(UsageError, match="multiples of 3 ranks"):
        check_world_size(cfg, 3)
