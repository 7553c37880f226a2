"""The `ares` command line: every command's --help, exit codes mapped in one place, stdout vs stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import run_ares
from typer.testing import CliRunner

from ares_cli.main import app

COMMANDS = [
    ["passrate"], ["passrate", "merge"], ["curate"], ["sft"], ["rl"], ["eval"], ["artifacts"], ["artifacts", "ls"],
    ["artifacts", "show"], ["artifacts", "lineage"], ["artifacts", "verify"], ["data"], ["data", "check"],
    ["toy"], ["toy", "init"], ["report", "compare"],
]  # fmt: skip


def test_root_help_lists_every_command():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in ("passrate", "curate", "sft", "rl", "eval", "artifacts", "data", "toy", "--artifacts-root",
                 "--json", "--verbose", "--quiet"):  # fmt: skip
        assert name in result.output


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help(command):
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_exit_codes_and_streams(tmp_path):
    missing = run_ares("artifacts", "show", "passrate-000000000000", root=tmp_path, check=False)
    assert missing.returncode == 3 and missing.stdout == "" and "error:" in missing.stderr
    usage = run_ares("eval", "--set", "nonsense=1", root=tmp_path, check=False)
    assert usage.returncode == 2 and "unknown config key 'nonsense'" in usage.stderr
    bad_flag = run_ares("passrate", "--no-such-flag", root=tmp_path, check=False)
    assert bad_flag.returncode == 2
    listed = run_ares("--json", "artifacts", "ls", root=tmp_path)
    assert json.loads(listed.stdout) == {"artifacts": []}


def test_a_launched_rank_keeps_exit_codes_and_output(tmp_path):
    """Under torchrun (WORLD_SIZE > 1) `ares` leaves through os._exit: codes and buffered output survive."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env |= {"WORLD_SIZE": "2", "ARES_ARTIFACTS": str(tmp_path)}

    def ares(*args):
        code = "from ares_cli.main import main; main()"
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)

    missing = ares("artifacts", "show", "passrate-000000000000")
    assert missing.returncode == 3 and "error:" in missing.stderr
    listed = ares("--json", "artifacts", "ls")
    assert listed.returncode == 0 and json.loads(listed.stdout) == {"artifacts": []}


def test_verify_exits_4_naming_the_file(tmp_path):
    from ares_cli.store.artifacts import ArtifactStore

    run = ArtifactStore(tmp_path).open_stage("demo", code_version="1", config={}, inputs=[])
    (run.work_dir / "rows.jsonl").write_text('{"a": 1}\n')
    path = run.finalize()
    assert run_ares("artifacts", "verify", process=False, root=tmp_path).returncode == 0
    (path / "rows.jsonl").write_text('{"a": 2}\n')
    broken = run_ares("artifacts", "verify", run.artifact_id, process=False, root=tmp_path, check=False)
    assert broken.returncode == 4 and "rows.jsonl" in broken.stderr
