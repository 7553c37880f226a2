"""Shared by the hostile ``ares plan`` input tests (tests/test_hostile_plan.py, test_hostile_deepspeed.py):
the alarm-guarded ``ares`` call whose :class:`PlanInputHang` tests/hostile_tally.py counts as a hang, the
refusal assertion, and the special files (FIFO, directory, sparse) every file input is tried with."""

from __future__ import annotations

import os
from pathlib import Path

from cli_runner import invoke_under_alarm

REPO = Path(__file__).resolve().parents[1]
TOY = str(REPO / "ares_cli" / "toy" / "base")
VL = str(REPO / "ares_cli" / "toy" / "vl_base")
ZERO2 = REPO / "pipelines" / "deepspeed" / "zero2.json"
HANG_AFTER_S = 60  # a refusal takes well under a second; the first call of a session imports torch


class PlanInputHang(Exception):
    """An ``ares`` call that did not return within :data:`HANG_AFTER_S`."""


def _ares(root: Path, *args: str):
    return invoke_under_alarm(
        ["--artifacts-root", str(root), *args], seconds=HANG_AFTER_S, hang=PlanInputHang
    )


def _flat(text: str) -> str:
    return " ".join(text.split())


def assert_refused(proc, code: int, *named: str) -> None:
    """Exit ``code``, no traceback, and an ``error:`` line on stderr holding each of ``named``."""
    told = proc.stdout + proc.stderr
    assert "Traceback" not in told, told[-2000:]
    assert proc.returncode == code, told[-2000:]
    errors = _flat(proc.stderr)
    assert "error" in errors.lower(), told[-2000:]
    for words in named:
        assert _flat(words) in errors, (words, proc.stderr[-2000:])


def write_sft_data(tmp_path_factory) -> Path:
    """Eight SFT examples, for the ``sft_data`` fixture of each file."""
    from fixtures_tiny_model import write_sft_jsonl

    return write_sft_jsonl(tmp_path_factory.mktemp("hostile-plan-sft") / "sft.jsonl", 8)


def _nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()


def _sparse(size: int):
    def write(path: Path) -> None:
        with open(path, "wb") as fh:
            fh.truncate(size)

    return write


SPECIAL_FILES = [("a FIFO", _fifo, "FIFO"), ("a directory", _directory, "a directory"),
                 ("a sparse 1 GiB file", _sparse(2**30), "limit")]  # fmt: skip


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    return path
