"""DeepSpeed in one process without a launcher: the group of one is formed in memory, with no port to choose.

A TCP store's port, however it is chosen (``bind(0)``, or at random below the ephemeral range), can be taken
by another process between choosing and listening: both choices failed with EADDRINUSE in parallel test runs
(`test_rl_cli`'s one-process DeepSpeed run). These tests fail on either of them."""

from __future__ import annotations

import os
import socket

import pytest

from ares_cli.training import distributed

LAUNCHER = ("MASTER_PORT", "MASTER_ADDR", "RANK", "LOCAL_RANK", "WORLD_SIZE")


@pytest.fixture
def no_launcher(monkeypatch):
    import torch.distributed as dist

    for key in LAUNCHER:
        monkeypatch.delenv(key, raising=False)
    assert not dist.is_initialized()
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_the_group_of_one_listens_on_no_port(no_launcher, monkeypatch):
    """Every socket opened while the group forms is refused: a TCP store would have to open one."""
    import torch.distributed as dist

    def refuse(*args, **kwargs):
        raise AssertionError("the group of one opened a socket")

    monkeypatch.setattr(socket, "socket", refuse)
    with distributed.deepspeed_ready():
        assert dist.is_initialized() and dist.get_world_size() == 1 and dist.get_rank() == 0
    assert "MASTER_PORT" not in os.environ
    assert (os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"]) == ("0", "0", "1")


def test_the_group_forms_while_every_port_is_taken(no_launcher, monkeypatch):
    """With MASTER_PORT pointing at a port another socket listens on, the group still forms: it uses none."""
    import torch.distributed as dist

    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        monkeypatch.setenv("MASTER_PORT", str(held.getsockname()[1]))
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        with distributed.deepspeed_ready():
            t = __import__("torch").ones(3)
            dist.all_reduce(t)
            assert t.tolist() == [1.0, 1.0, 1.0]
