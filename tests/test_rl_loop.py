"""The RL loop's schedule (when it validates and checkpoints) and its shape: the loops read in one screen."""

from __future__ import annotations

import ast
from pathlib import Path

from ares_cli.training.rl.config import resolve_rl_config
from ares_cli.training.rl.phases import checkpoint_due, validation_due

ROOT = Path(__file__).resolve().parents[1] / "ares_cli" / "training"


def test_validation_every_n_steps_and_after_the_last():
    cfg = resolve_rl_config(sets=["steps=7", "val.every=3"])
    assert [d for d in range(1, 8) if validation_due(cfg, d)] == [3, 6, 7]
    cfg = resolve_rl_config(sets=["steps=7", "val.every=0"])
    assert [d for d in range(1, 8) if validation_due(cfg, d)] == [7]


def test_checkpoint_every_n_steps_and_at_an_early_stop_never_after_the_last():
    cfg = resolve_rl_config(sets=["steps=7", "save_every=3"])
    assert [d for d in range(1, 8) if checkpoint_due(cfg, d, stop=7)] == [3, 6]
    assert [d for d in range(1, 6) if checkpoint_due(cfg, d, stop=5)] == [3, 5]  # max_steps_this_run=5
    cfg = resolve_rl_config(sets=["steps=4", "save_every=0"])
    assert [d for d in range(1, 3) if checkpoint_due(cfg, d, stop=2)] == [2]
    assert not any(checkpoint_due(cfg, d, stop=4) for d in range(1, 5))  # the final model is saved instead


def _function_lines(path: Path, name: str) -> int:
    node = next(n for n in ast.walk(ast.parse(path.read_text())) if getattr(n, "name", None) == name)
    return node.end_lineno - node.lineno + 1


def test_the_training_loops_read_in_one_screen():
    assert _function_lines(ROOT / "rl" / "trainer.py", "train_rl") <= 100
    assert _function_lines(ROOT / "sft.py", "train_sft") <= 100
    assert len((ROOT / "rl" / "trainer.py").read_text().splitlines()) < 400
