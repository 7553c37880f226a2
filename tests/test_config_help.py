"""Every config key of every stage (nested sections included) carries a non-empty one-line help."""

from __future__ import annotations

import dataclasses

import pytest

from ares_cli.config import describe
from ares_cli.report.config_docs import STAGES, config_class

# Configs that are not a stage's top level but are documented and built from the same fields.
EXTRA = (
    "ares_cli.stages.sampling:SamplingConfig",
    "ares_cli.algorithms.aepo:AEPOConfig",
    "ares_cli.algorithms.paec:PAECConfig",
    "ares_cli.algorithms.policy_losses:PolicyLossConfig",
)
TARGETS = [target for _, target, _ in STAGES] + list(EXTRA)


def _section_fields(cls: type, prefix: str = ""):
    """(dotted name, field) of every field that is itself a nested section, recursively."""
    instance = cls()
    for f in dataclasses.fields(cls):
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            yield f"{prefix}{f.name}", f
            yield from _section_fields(type(value), f"{prefix}{f.name}.")


@pytest.mark.parametrize("target", TARGETS)
def test_every_key_has_help(target):
    cls = config_class(target)
    rows = describe(cls)
    assert rows, f"{target} has no fields"
    missing = [key for key, _, help_text in rows if not help_text.strip()]
    missing += [name for name, f in _section_fields(cls) if not f.metadata.get("help", "").strip()]
    assert not missing, f"{target}: keys without help: {missing}"


def test_rl_sections_are_walked():
    keys = {key for key, _, _ in describe(config_class("ares_cli.training.rl.config:RLConfig"))}
    assert {"aepo.window", "paec.top_p", "filter.mode", "loss.clip_high", "optim.lr"} <= keys


def test_options_keep_defaults():
    from ares_cli.algorithms.aepo import AEPOConfig
    from ares_cli.algorithms.paec import PAECConfig

    assert AEPOConfig().kl_target == (0.02, 0.05, 0.1) and AEPOConfig().trigger_words == ()
    assert AEPOConfig.field_help()["window"] == "4"
    assert (PAECConfig().top_p, PAECConfig().top_k, PAECConfig().alpha) == (0.85, 10000, 8e-4)
