"""Outcome rewards and the dynamic-sampling filter: pure functions over grades and lengths.

- accuracy: ``correct`` for a correct grade, ``incorrect`` otherwise (invalid / timeout / error included);
- format: ``format_penalty`` subtracted when the response has no ``\\boxed{}`` answer (grade ``invalid``);
  ``format_reward`` added when it has one that was graded (``correct`` or ``incorrect``; PAEC appendix B.2's
  weak +0.05 for a final ``\\boxed{}``). A timeout or grader error gets neither;
- DAPO soft overlong punishment (Yu et al. 2025, eq. 13) with L_max = the response budget and
  L_cache = ``overlong_buffer``: 0 while |y| <= L_max - L_cache, then ((L_max - L_cache) - |y|) / L_cache
  (times ``overlong_penalty``), reaching -penalty at |y| = L_max.
- filter (DAPO dynamic sampling / ARES online filtering): a group is dropped when all its rewards are equal
  (zero advantage) or its mean accuracy lies outside [low, high];
- the step's outcome advantages (:func:`step_advantages`): ``loss.advantage`` over this rank's groups,
  with the batch-level estimators' statistics summed over every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def overlong_penalty(length: int, max_new_tokens: int, buffer: int, penalty: float = 1.0) -> float:
    """DAPO's length-aware penalty (<= 0) of a response of ``length`` tokens."""
    start = max_new_tokens - buffer
    if length <= start:
        return 0.0
    return -penalty * min(1.0, (length - start) / buffer)


def response_reward(grade: str, n_tokens: int, cfg, max_new_tokens: int) -> float:
    """The base (pre-algorithm) reward of one response; ``cfg`` is a RewardConfig."""
    reward = cfg.correct if grade == "correct" else cfg.incorrect
    if grade == "invalid":
        reward -= cfg.format_penalty
    elif grade in ("correct", "incorrect"):
        reward += cfg.format_reward
    if cfg.overlong_shaping:
        reward += overlong_penalty(n_tokens, max_new_tokens, cfg.overlong_buffer, cfg.overlong_penalty)
    return float(reward)


@dataclass(frozen=True)
class FilterVerdict:
    keep: bool
    reason: str  # "kept", "all_equal", "out_of_band", "off"


def filter_group(rewards: Sequence[float], correct: Sequence[bool], cfg) -> FilterVerdict:
    """Keep or drop one group (``cfg`` is a FilterConfig)."""
    if cfg.mode == "off":
        return FilterVerdict(True, "off")
    if max(rewards) - min(rewards) <= 1e-12:
        return FilterVerdict(False, "all_equal")
    accuracy = sum(bool(c) for c in correct) / len(correct)
    if not cfg.low <= accuracy <= cfg.high:
        return FilterVerdict(False, "out_of_band")
    return FilterVerdict(True, "kept")


def step_advantages(loss, rewards, batch, reduce):
    """Advantages [N] (on ``rewards``' device) and metrics of one RL step: ``loss.advantage`` (``loss``: the
    RL config's section) over this rank's rows, each row's length its trained tokens, batch statistics summed
    over ranks by ``reduce``."""
    from ares_cli.algorithms.advantages import compute_advantages

    device = rewards.device

    def over_ranks(t):
        return reduce(t.to(device)).cpu()

    adv, metrics = compute_advantages(loss.advantage, rewards.float().cpu(), group_ids=batch.group.cpu(),
                                      eps=loss.adv_eps, std=loss.adv_std, reduce=over_ranks,
                                      lengths=batch.response_mask.sum(-1).cpu())  # fmt: skip
    return adv.to(device), metrics
