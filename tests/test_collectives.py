"""JSON collectives between two real gloo processes: payloads of different sizes, empty ones, unicode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import child_processes
import pytest

pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[1]
SCRIPT = """
import json, os, sys
from ares_cli.training import distributed
distributed.init_from_env(cpu=True)
rank = int(os.environ["RANK"])
mine = [] if rank == 1 else [{"rank": rank, "text": "ü∑" * 5000, "ids": list(range(3000))}]
gathered = distributed.all_gather_json(mine)
sent = distributed.broadcast_json({"from": rank, "n": 7} if rank == 1 else None, src=1)
print(json.dumps({"gathered": gathered, "broadcast": sent}))
"""


def test_all_gather_and_broadcast_json_on_two_ranks(tmp_path):
    script = tmp_path / "collectives.py"
    script.write_text(SCRIPT)
    env = child_processes.two_rank_env(str(REPO))
    procs = [subprocess.Popen([sys.executable, str(script)], env=env | {"RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]  # fmt: skip
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    expected_first = [{"rank": 0, "text": "ü∑" * 5000, "ids": list(range(3000))}]
    for out, _ in outputs:
        result = json.loads(out.strip().splitlines()[-1])
        assert result["gathered"] == [expected_first, []]
        assert result["broadcast"] == {"from": 1, "n": 7}
