"""DeepSpeed in one process without a launcher: the group's port comes from below the kernel's ephemeral
range, where no outgoing connection (gloo's, another job's) can take it between choosing and listening."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ares_cli.training import distributed

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@pytest.mark.skipif(not RANGE.is_file(), reason="no Linux ephemeral port range to compare with")
def test_the_single_process_port_lies_below_the_ephemeral_range(monkeypatch):
    for key in ("MASTER_PORT", "MASTER_ADDR", "RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    low = int(RANGE.read_text().split()[0])
    for _ in range(5):
        monkeypatch.delenv("MASTER_PORT", raising=False)
        distributed._single_process_env()
        assert 20000 <= int(os.environ["MASTER_PORT"]) < low


def test_a_port_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv("MASTER_PORT", "41234")
    distributed._single_process_env()
    assert os.environ["MASTER_PORT"] == "41234"
