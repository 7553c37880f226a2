"""Stdout carries the command's result alone: what a library prints while a command runs goes to stderr."""

from __future__ import annotations

import json
import logging
import sys

from typer.testing import CliRunner

from ares_cli.main import app
from ares_cli.store.artifacts import ArtifactStore


def test_a_library_printing_to_stdout_mid_command_lands_on_stderr(monkeypatch, tmp_path):
    """Like DeepSpeed on import (a logging handler bound to the stdout of that moment) or a stray print."""
    listed = ArtifactStore.list

    def noisy_list(self, stage=None):
        print("noise from a print")
        logger = logging.getLogger("ares-test-noisy-library")
        logger.propagate = False
        logger.addHandler(logging.StreamHandler(sys.stdout))
        logger.warning("noise from a logger")
        return listed(self, stage)

    monkeypatch.setattr(ArtifactStore, "list", noisy_list)
    result = CliRunner().invoke(app, ["--artifacts-root", str(tmp_path), "--json", "artifacts", "ls"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"artifacts": []}
    assert "noise from a print" in result.stderr and "noise from a logger" in result.stderr


def test_help_stays_on_stdout():
    for command in ([], ["rl"], ["artifacts", "ls"]):
        result = CliRunner().invoke(app, [*command, "--help"])
        assert result.exit_code == 0 and "Usage: ares" in result.stdout, command
