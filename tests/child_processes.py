"""Child processes that report where they hang: on a timeout every process of the child's session gets
SIGABRT, and with ``PYTHONFAULTHANDLER`` set each Python among them prints every thread's stack to its
stderr, which the failure message carries (instead of a bare timeout with the children's output lost)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest


def _abort_and_collect(procs: list[subprocess.Popen]) -> list[tuple[str, str]]:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGABRT)
    collected = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        collected.append((out or "", err or ""))
    return collected


def start(cmd: list[str], *, env: dict[str, str], merge_stderr: bool = False, **kwargs) -> subprocess.Popen:
    """``Popen`` in a session of its own, with the fault handler on."""
    return subprocess.Popen(cmd, env=env | {"PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)  # fmt: skip


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[tuple[str, str]]:
    """(stdout, stderr) of each process; a test failure with their stacks if any outlives ``timeout``."""
    try:
        return [tuple(s or "" for s in proc.communicate(timeout=timeout)) for proc in procs]
    except subprocess.TimeoutExpired:
        collected = _abort_and_collect(procs)
        tails = "\n".join(
            f"--- process {i}:\n{err[-5000:]}{out[-1500:]}" for i, (out, err) in enumerate(collected)
        )
        pytest.fail(f"still running after {timeout:.0f} s; where each process waited:\n{tails}")


def run(cmd: list[str], *, env: dict[str, str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(capture_output=True, text=True)`` that dumps the stacks of a hung child (and of the
    ranks a launcher such as torchrun started in its session)."""
    proc = start(cmd, env=env, **kwargs)
    ((out, err),) = wait_all([proc], timeout)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def two_rank_env(pythonpath: str, **extra: str) -> dict[str, str]:
    """The environment of a 2-rank gloo launch on this host: a free port, one torch thread per rank,
    ``pythonpath`` first on the path; each rank adds its own ``RANK`` and ``LOCAL_RANK``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return os.environ | {"PYTHONPATH": pythonpath, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                         "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1", **extra}  # fmt: skip
