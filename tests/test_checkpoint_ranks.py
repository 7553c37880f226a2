"""On resume rank 0 alone re-hashes a checkpoint's files and the other ranks take its choice: two CPU ranks
(gloo, no DeepSpeed) write two checkpoints, the newest is damaged, and both pick the one before it with
rank 1 hashing nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import child_processes

REPO = Path(__file__).resolve().parents[1]
SCRIPT = """
import json, sys
from pathlib import Path
import torch
import ares_cli.store.hashing as hashing
from ares_cli.training import checkpoint, distributed

dist = distributed.init_from_env(cpu=True)
root = Path(sys.argv[1])
for step in (1, 2):
    checkpoint.save(root, step, model_state={"w": torch.full((4,), float(step))} if dist.is_main else None,
                    optimizer_state={"torch": {"lr": 0.1}}, meta={"step": step, "world_size": 2}, rank=dist.rank,
                    barrier=distributed.barrier)
if dist.is_main:  # the newest damaged on disk: a byte of rank 1's optimizer file flipped, its size kept
    damaged = root / "step-000002" / "optimizer.rank1.safetensors"
    data = bytearray(damaged.read_bytes())
    data[-1] ^= 1
    damaged.write_bytes(bytes(data))
distributed.barrier()
hashed, real = [], hashing.sha256_file
hashing.sha256_file = lambda path: hashed.append(Path(path).name) or real(path)
found = checkpoint.latest(root, lambda message: None)
print(json.dumps({"rank": dist.rank, "hashed": hashed, "found": found.name}))
distributed.leave_process(0)
"""


def test_rank_zero_verifies_the_checkpoints_and_the_other_rank_takes_its_choice(tmp_path):
    script = tmp_path / "resume.py"
    script.write_text(SCRIPT)
    env = child_processes.two_rank_env(str(REPO))
    procs = [child_processes.start([sys.executable, str(script), str(tmp_path / "ckpt")], cwd=REPO,
                                   env=env | {"RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]  # fmt: skip
    outputs = child_processes.wait_all(procs, timeout=240)
    assert all(p.returncode == 0 for p in procs), "\n".join(err[-3000:] for _, err in outputs)
    rows = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert [r["found"] for r in rows] == ["step-000001", "step-000001"]  # the damaged newest is skipped
    assert rows[1]["hashed"] == []  # rank 1 reads no checkpoint file to verify it
    assert "optimizer.rank1.safetensors" in rows[0]["hashed"]  # rank 0 checks every rank's files
    assert rows[0]["hashed"].count("model.safetensors") == 2  # the damaged step's and the one it resumes
