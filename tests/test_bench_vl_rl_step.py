"""benchmarks/gpu/vl_rl_step.py: the CPU smoke run, and the 3B configuration is a valid Qwen2.5-VL-3B."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "vl_rl_step.py"


def _module():
    spec = importlib.util.spec_from_file_location("vl_rl_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_run_reports_both_steps(capsys):
    result = _module().main(["--tiny", "--response", "12"])
    assert result["vl"]["tokens"] > result["text_only"]["tokens"]  # the image adds its tokens
    assert result["vl"]["step_s"] > 0 and result["text_only"]["step_s"] > 0
    assert '"benchmark": "vl_rl_step"' in capsys.readouterr().out


def test_3b_configuration_is_consistent():
    from transformers import Qwen2_5_VLForConditionalGeneration

    config = _module().build_config(tiny=False)
    text = config.text_config
    assert sum(text.rope_parameters["mrope_section"]) == text.hidden_size // text.num_attention_heads // 2
    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config)
    n = sum(p.numel() for p in model.parameters())
    assert 3.6e9 < n < 3.9e9, n  # Qwen2.5-VL-3B: 3.75 B parameters (tied embeddings)
