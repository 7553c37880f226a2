"""The RL run's fixed parts are typed: every field of ``RLRun`` names its class (none is ``Any``), and each
annotation resolves to a real class of the project or of torch, transformers and DeepSpeed."""

from __future__ import annotations

import dataclasses
import re
import typing


def test_no_field_of_the_rl_run_is_typed_any():
    from ares_cli.training.rl.setup import RLRun

    untyped = [f.name for f in dataclasses.fields(RLRun) if re.search(r"\bAny\b", str(f.type))]
    assert untyped == []


def test_every_field_type_of_the_rl_run_resolves():
    import torch
    from deepspeed import DeepSpeedEngine
    from transformers import PreTrainedTokenizerBase, ProcessorMixin

    from ares_cli.console import Progress
    from ares_cli.generation.types import Backend
    from ares_cli.training.distributed import DistInfo
    from ares_cli.training.rl import setup
    from ares_cli.training.rl.algos import Algorithm
    from ares_cli.training.rl.config import RLConfig
    from ares_cli.training.rl.rollout import PromptSampler

    names = dict(torch=torch, DeepSpeedEngine=DeepSpeedEngine, PreTrainedTokenizerBase=PreTrainedTokenizerBase,
                 ProcessorMixin=ProcessorMixin, Progress=Progress, Backend=Backend, DistInfo=DistInfo,
                 Algorithm=Algorithm, RLConfig=RLConfig, PromptSampler=PromptSampler)  # fmt: skip
    hints = typing.get_type_hints(setup.RLRun, globalns=vars(setup) | names)
    assert hints["cfg"] is RLConfig and hints["algo"] is Algorithm and hints["sampler"] is PromptSampler
    assert hints["engine"] == DeepSpeedEngine | None and hints["model"] is torch.nn.Module
