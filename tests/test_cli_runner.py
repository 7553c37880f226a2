"""The in-process ``ares`` runner (``run_ares(..., process=False)``) against a fresh interpreter: the same
exit code and stderr for a refused command, and nothing a command changes left behind in the test process."""

from __future__ import annotations

import os

import pytest
from conftest import run_ares

REFUSED = [
    ("rl", "--model", "ares_cli/toy/base", "--data", "toy-train", "--set", "loss.policy_loss=ppo_clipx"),
    ("rl", "--model", "ares_cli/toy/base", "--data", "toy-train", "--algo", "grpo_typo"),
]


@pytest.mark.parametrize("args", REFUSED)
def test_in_process_and_subprocess_refuse_alike(args, tmp_path):
    before_env, before_cwd = dict(os.environ), os.getcwd()
    inside = run_ares(*args, root=tmp_path, check=False, process=False)
    assert dict(os.environ) == before_env and os.getcwd() == before_cwd
    outside = run_ares(*args, root=tmp_path, check=False, process=True)
    assert inside.returncode == outside.returncode == 2
    assert inside.stderr == outside.stderr and "Traceback" not in inside.stderr
    assert inside.stdout == outside.stdout
