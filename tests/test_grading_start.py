"""Grading workers fork from a forkserver that has math_verify imported (where the platform has one), grade
exactly as spawned workers do, and still load a grader put on ``sys.path`` after that server started, with
the caller's environment of the moment, as a spawned worker would."""

from __future__ import annotations

import multiprocessing as mp
import os
import sys

import pytest

from ares_cli.errors import UsageError
from ares_cli.grading import GradingPool
from ares_cli.grading import start_method as sm

ITEMS = [("2", r"so \boxed{2}"), (r"\frac{1}{2}", r"\boxed{0.5}"), ("3", r"\boxed{4}"), ("x+1", r"\boxed{1+x}"),
         ("[1,2)", r"\boxed{[1, 2)}"), ("7", "no box")]  # fmt: skip
HAS_FORKSERVER = "forkserver" in mp.get_all_start_methods()


def _parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


@pytest.mark.skipif(not HAS_FORKSERVER or sys.platform != "linux", reason="a forkserver and /proc (Linux)")
def test_workers_fork_from_the_forkserver_and_grade_as_spawned_workers_do():
    default_before = mp.get_start_method()  # the platform's default, fixed from here on
    with GradingPool("math_verify", workers=2, timeout_s=30) as pool:
        forked = pool.grade(ITEMS)
        parents = {_parent_pid(pid) for pid in pool.worker_pids()}
    assert pool.start_method == "forkserver"
    assert len(parents) == 1 and os.getpid() not in parents  # forked by the server, not by this process
    with GradingPool("math_verify", workers=2, timeout_s=30, mp_context="spawn") as spawned_pool:
        spawned = spawned_pool.grade(ITEMS)
        assert {_parent_pid(pid) for pid in spawned_pool.worker_pids()} == {os.getpid()}
    assert spawned_pool.start_method == "spawn"
    assert forked == spawned
    assert [r.grade for r in forked] == ["correct", "correct", "incorrect", "correct", "correct", "invalid"]
    assert mp.get_start_method() == default_before  # the process-wide default untouched


@pytest.mark.skipif(not HAS_FORKSERVER, reason="no forkserver on this platform")
def test_a_grader_on_a_path_added_after_the_server_started_loads_with_the_callers_environment(
    tmp_path, monkeypatch
):
    with GradingPool("boxed_int", workers=1, timeout_s=30) as pool:  # the server is running from here on
        assert pool.grade([("4", r"\boxed{4}")])[0].grade == "correct"
    (tmp_path / "late_graders_mod.py").write_text(
        "import os\n\n\ndef ends_with_gold(gold, response):\n"
        "    return response.strip().endswith(gold + os.environ['ARES_TEST_SUFFIX'])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ARES_TEST_SUFFIX", "!")  # set after the server started: the workers see it too
    with GradingPool("late_graders_mod:ends_with_gold", workers=1, timeout_s=30, trust_code=True) as pool:
        assert pool.start_method == "forkserver"
        grades = [r.grade for r in pool.grade([("9", "it is 9!"), ("9", "it is 9")])]
    assert grades == ["correct", "incorrect"]


def test_auto_falls_back_to_spawn_without_a_forkserver(monkeypatch):
    monkeypatch.setattr(sm.mp, "get_all_start_methods", lambda: ["spawn"])
    assert sm.worker_context().get_start_method() == "spawn"
    with pytest.raises(UsageError, match="fork"):
        sm.worker_context("fork")


def test_the_server_preloads_installed_modules_only():
    assert sm.server_preload(["ares_cli.grading.worker", "sympy", "math_verify"]) == ["math_verify", "sympy"]
