"""The RL algorithms by name (``--algo``), each declared once: its hooks, its preset and the config sections it
reads (:class:`AlgorithmEntry`). ``--help``, ``docs/config.md``, the config's choices and the presets all read
this table, and :func:`check_reads` refuses a constant the chosen algorithm, loss or estimator does not read.

The hooks are named as ``"module:Class"`` and imported when an algorithm is built, so this module imports no
torch and ``ares rl --help`` can list the names at once. GRPO and the other configuration-only baselines use
the hook interface itself (:class:`~.algos.Algorithm`); AEPO, PAEC and AER override hooks in
:mod:`.algos_aepo`, :mod:`.algos_paec` and :mod:`.algos_aer`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ares_cli.algorithms.registry import Entry, Registry
from ares_cli.errors import UsageError

__all__ = ["ALGORITHMS", "AlgorithmEntry", "PRESETS", "check_reads", "build_algorithm"]

HOOKS = "ares_cli.training.rl.algos:Algorithm"


@dataclass(frozen=True)
class AlgorithmEntry(Entry):
    """An RL algorithm: ``preset`` overrides the config defaults (YAML, ``--set`` and flags override it);
    ``sections``: the algorithm-specific config sections it reads (``aepo``, ``paec``, ``aer``), so a key set
    in a section the chosen algorithm does not read is a usage error."""

    preset: Mapping[str, Any] = field(default_factory=dict)
    sections: tuple[str, ...] = ()


ALGORITHMS: Registry[AlgorithmEntry] = Registry("RL algorithm", entry=AlgorithmEntry)

# GSPO sec. 5.1: clip ranges 3e-4 / 4e-4, no dual clip, sequence-level mean (eq. 5); no KL term (as the
# authors ran it, cited by TRL's GSPO docs). Four optimiser steps per rollout batch are a recipe setting.
GSPO = {"loss": {"policy_loss": "gspo", "clip_low": 3e-4, "clip_high": 4e-4, "dual_clip": None,
                 "aggregation": "seq_mean_token_mean"}, "kl": {"coef": 0.0}}  # fmt: skip

_register = ALGORITHMS.register
_register("grpo", HOOKS, summary="GRPO: PPO clip, group-normalised advantages, KL loss (DeepSeekMath)")
_register("dapo", HOOKS, summary="DAPO: clip-higher, token-mean loss, dynamic sampling, overlong shaping",
          preset={"loss": {"clip_high": 0.28, "aggregation": "token_mean"}, "kl": {"coef": 0.0},
                  "filter": {"mode": "filter"}, "reward": {"overlong_shaping": True}})  # fmt: skip
_register("drgrpo", HOOKS, summary="Dr.GRPO: no std division, constant normaliser",
          preset={"loss": {"advantage": "drgrpo", "aggregation": "seq_sum_constant"}})  # fmt: skip
_register("cispo", HOOKS, summary="CISPO as PAEC's baseline ran it in verl: IS weight clipped to [1, 6]",
          preset={"loss": {"policy_loss": "cispo"}})  # fmt: skip
_register("clip_cov", HOOKS, summary="Clip-Cov (verl's loss: no dual clip)",
          preset={"loss": {"policy_loss": "clip_cov", "dual_clip": None}})  # fmt: skip
_register("kl_cov", HOOKS, summary="KL-Cov", preset={"loss": {"policy_loss": "kl_cov"}})
_register("gspo", HOOKS, summary="GSPO: sequence ratio clipped at 3e-4 / 4e-4, no KL", preset=GSPO)
_register("gspo_token", HOOKS, summary="GSPO-token: GSPO for token-level advantages",
          preset={**GSPO, "loss": {**GSPO["loss"], "policy_loss": "gspo_token"}})  # fmt: skip
_register("entropy", HOOKS, summary="global entropy bonus 8e-4 (PAEC's baseline)",
          preset={"loss": {"entropy_coef": 8e-4}})  # fmt: skip
_register("topent", HOOKS, summary="80/20: policy gradient on the top 20 % of tokens by entropy",
          preset={"loss": {"top_entropy_frac": 0.2}})  # fmt: skip
_register("aepo", "ares_cli.training.rl.algos_aepo:AEPO", sections=("aepo",),
          summary="ARES's AEPO: hierarchical entropy reward, token-adaptive KL",
          preset={"kl": {"coef": 1.0}, "filter": {"mode": "filter"}})  # fmt: skip
_register("paec", "ares_cli.training.rl.algos_paec:PAEC", sections=("paec",),
          summary="PAEC: position-aware entropy calibration")  # fmt: skip
_register("aer", "ares_cli.training.rl.algos_aer:AER", sections=("aer",),
          summary="AER: adaptive entropy regularisation (PAEC's baseline; a reconstruction)")  # fmt: skip


class _Presets(Mapping):
    """``{name: preset}`` read from :data:`ALGORITHMS` (so an algorithm registered later has its preset)."""

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        if name not in ALGORITHMS:
            raise KeyError(name)
        return ALGORITHMS.entry(name).preset

    def __iter__(self) -> Iterator[str]:
        return iter(ALGORITHMS.names())

    def __len__(self) -> int:
        return len(ALGORITHMS)


PRESETS: Mapping[str, Mapping[str, Any]] = _Presets()


# the estimator keywords behind the loss section's advantage keys (AdvantageEntry.reads names the keywords)
ADVANTAGE_KEYS = {"adv_eps": "eps", "adv_std": "std"}


def _set_in(layer: dict[str, Any], section: str) -> set[str]:
    value = layer.get(section)
    return set(value) if isinstance(value, dict) else set()


def _chosen_at(layers: list[dict[str, Any]], *keys: str) -> int:
    """Index of the highest layer that names the algorithm or one of ``keys`` (``"loss.policy_loss"``); -1 if none."""

    def names(layer):
        return layer.get("algo") is not None or any(
            k.split(".")[1] in _set_in(layer, k.split(".")[0]) for k in keys
        )

    return max((i for i, layer in enumerate(layers) if names(layer)), default=-1)


def check_reads(cfg, layers: list[dict[str, Any]]) -> None:
    """A constant that the user set (in ``layers``: YAML, --set, flags; never the preset) and that the chosen
    loss, advantage estimator or algorithm does not read is a UsageError, so ``--algo cispo --set
    loss.clip_high=0.28`` (CISPO clips with ``cispo_eps_*``) fails at once instead of training unchanged.
    Set in a layer below the one that chose the algorithm (a recipe's ``aepo:`` keys under ``--algo grpo``),
    it is a warning: the choice above knowingly replaced the recipe's. What each reads is declared by its
    registry entry; the shared modifiers (``every_loss``) and a section's ``every_algorithm`` fields are read
    by all."""
    from ares_cli.algorithms.advantages import ADVANTAGES
    from ares_cli.algorithms.policy_loss_core import POLICY_LOSSES, loss_constants

    problems: list[tuple[int, int, str, str]] = []  # (layer, layer that chose, key, message)
    entry, estimator = POLICY_LOSSES.entry(cfg.loss.policy_loss), ADVANTAGES.entry(cfg.loss.advantage)
    algo, specific = ALGORITHMS.entry(cfg.algo), set(loss_constants(every_loss=False))
    loss_at, adv_at, algo_at = (_chosen_at(layers, "loss.policy_loss"), _chosen_at(layers, "loss.advantage"),
                                _chosen_at(layers))  # fmt: skip
    for i, layer in enumerate(layers):
        loss_keys = _set_in(layer, "loss")
        for key in sorted((loss_keys & specific) - set(entry.reads)):
            readers = ", ".join(e.name for e in POLICY_LOSSES.entries() if key in e.reads)
            problems.append((i, loss_at, f"loss.{key}", f"config key 'loss.{key}' is set, but policy loss {entry.name!r} does not read it "
                             f"(it is a constant of {readers}); {entry.name} reads: "
                             f"{', '.join(entry.reads) or 'no loss-specific constant'}"))  # fmt: skip
        for key in sorted(
            k for k, word in ADVANTAGE_KEYS.items() if k in loss_keys and word not in estimator.reads
        ):
            problems.append((i, adv_at, f"loss.{key}", f"config key 'loss.{key}' is set, but advantage estimator {estimator.name!r} "
                             f"does not read it ({estimator.name} reads: "
                             f"{', '.join(estimator.reads) or 'neither eps nor std'})"))  # fmt: skip
        for other in ALGORITHMS.entries():
            for section in sorted(set(other.sections) - set(algo.sections)):
                shared = {
                    f.name
                    for f in dataclasses.fields(getattr(cfg, section))
                    if f.metadata.get("every_algorithm")
                }
                for key in sorted(_set_in(layer, section) - shared):
                    problems.append((i, algo_at, f"{section}.{key}", f"config key '{section}.{key}' is set, but algorithm {algo.name!r} "
                                     f"does not read the {section} section (--algo {other.name} does)"))  # fmt: skip
    for i, chosen, _key, message in problems:
        if i >= chosen:
            raise UsageError(message)
    if problems:
        keys = ", ".join(sorted({key for _, _, key, _ in problems}))
        warnings.warn(f"{keys}: ignored, not read by what a later layer chose (--algo {algo.name}, "
                      f"loss.policy_loss={entry.name}, loss.advantage={estimator.name})", stacklevel=3)  # fmt: skip


def build_algorithm(cfg, reduce, gather=None):
    """The algorithm named ``cfg.algo``; ``reduce`` sums across ranks, ``gather`` concatenates 1-D tensors."""
    return ALGORITHMS.get(cfg.algo)(cfg, reduce, gather)
