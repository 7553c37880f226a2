"""The RL algorithms by name (``--algo``). This module sits above its members, so imports run one way:
registry -> :mod:`.algos_adaptive` (AEPO, PAEC), :mod:`.algos_aer` (AER) -> :mod:`.algos` (the hook
interface; GRPO and the other configuration-only baselines are that base class itself)."""

from __future__ import annotations

from ares_cli.algorithms.registry import Registry
from ares_cli.training.rl.algos import Algorithm, Reduce
from ares_cli.training.rl.algos_adaptive import AEPO, PAEC
from ares_cli.training.rl.algos_aer import AER

ALGORITHMS: Registry = Registry("RL algorithm")
BASELINES = ("grpo", "dapo", "drgrpo", "cispo", "clip_cov", "kl_cov", "gspo", "gspo_token", "entropy",
             "topent")  # fmt: skip

for _name in BASELINES:
    ALGORITHMS.register(_name)(Algorithm)
ALGORITHMS.register("aepo")(AEPO)
ALGORITHMS.register("paec")(PAEC)
ALGORITHMS.register("aer")(AER)


def build_algorithm(cfg, reduce: Reduce, gather: Reduce | None = None) -> Algorithm:
    """The algorithm named ``cfg.algo``; ``reduce`` sums across ranks, ``gather`` concatenates 1-D tensors."""
    return ALGORITHMS.get(cfg.algo)(cfg, reduce, gather)
