"""``ares rl`` under a launcher: rank 0 loads, validates and counts the prompts once; every other rank
receives the same records, prompt lengths and input keys; a bad dataset fails every rank (exit 3)."""

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
import ares_cli.data.loader as loader
import ares_cli.training.rl.rollout as rollout
from ares_cli.errors import AresError
from ares_cli.store.artifacts import ArtifactStore
from ares_cli.stages.prepare_rl import prepare_rl

calls = {"load": 0, "encode": 0}
load, encode = loader.load_problems, rollout.encode_prompts
def counted_load(*a, **k):
    calls["load"] += 1
    return load(*a, **k)
def counted_encode(*a, **k):
    calls["encode"] += 1
    return encode(*a, **k)
loader.load_problems, rollout.encode_prompts = counted_load, counted_encode
model, data, root = sys.argv[1:4]
sets = ["data_limit=8", "rollout.prompts_per_step=2", "optim.mini_batch_size=2", "rollout.max_new_tokens=8"]
try:
    out = prepare_rl(ArtifactStore(root), model=model, data=data, val_data="toy-val", yaml_path=None, sets=sets,
                     flags={}, world_size=2, on_gpu=False)
except AresError as err:
    print(json.dumps({"error": str(err), "exit_code": err.exit_code}))
    sys.exit(err.exit_code)
print(json.dumps({"calls": calls, "ids": [p["id"] for p in out.train.records], "val": len(out.val.records),
                  "lengths": out.prompt_lengths, "limit": out.prompt_limit,
                  "refs": {k: v.sha256 for k, v in out.refs.items() if k != "model"},
                  "locations": out.train.locations[:2], "manifest": out.train.manifest.name}))
"""


def _two_ranks(tmp_path, model, data) -> list[tuple[int, dict]]:
    script = tmp_path / "prepare.py"
    script.write_text(SCRIPT)
    env = child_processes.two_rank_env(str(REPO), LOCAL_WORLD_SIZE="2", CUDA_VISIBLE_DEVICES="")
    procs = [subprocess.Popen([sys.executable, str(script), str(model), data, str(tmp_path / "art")],
                              env=env | {"RANK": str(r), "LOCAL_RANK": str(r)}, cwd=str(REPO),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]  # fmt: skip
    outputs = [p.communicate(timeout=300) for p in procs]
    return [(p.returncode, json.loads(out.strip().splitlines()[-1]) if out.strip() else {"stderr": err[-2000:]})
            for p, (out, err) in zip(procs, outputs, strict=True)]  # fmt: skip


def test_rank_0_loads_and_counts_once_and_every_rank_gets_the_same_data(tmp_path, tiny_model_dir):
    (code0, rank0), (code1, rank1) = _two_ranks(tmp_path, tiny_model_dir, "toy-train")
    assert code0 == 0 and code1 == 0, (rank0, rank1)
    assert rank0["calls"] == {"load": 2, "encode": 1}  # train and val loaded, the prompts encoded, once
    assert rank1["calls"] == {"load": 0, "encode": 0}  # received, not loaded again
    for key in ("ids", "val", "lengths", "limit", "refs", "locations", "manifest"):
        assert rank0[key] == rank1[key], key
    assert (
        len(rank0["ids"]) == 8 and len(rank0["lengths"]) == 8 and set(rank0["refs"]) == {"data", "val_data"}
    )


def test_bad_data_on_rank_0_fails_every_rank_with_its_exit_code(tmp_path, tiny_model_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "problem": "p", "answer": ""}\n{"id": "b", "problem": "q", "answer": "1"}\n')
    (code0, rank0), (code1, rank1) = _two_ranks(tmp_path, tiny_model_dir, str(bad))
    assert code0 == code1 == 3
    assert "row 1, field 'answer'" in rank0["error"]
    assert rank1["error"].startswith("rank 0 could not prepare the data") and "row 1" in rank1["error"]


def test_fitting_prompts_uses_the_lengths_it_is_given_and_encodes_nothing(monkeypatch):
    from types import SimpleNamespace

    import ares_cli.training.rl.rollout as rollout
    from ares_cli.training.rl.setup import fitting_prompts

    monkeypatch.setattr(rollout, "encode_prompts", lambda *a, **k: pytest.fail("prompts encoded again"))
    rollout = SimpleNamespace(max_prompt_tokens=10, max_new_tokens=4)
    problems = [{"id": str(i)} for i in range(4)]
    logged = []
    kept = fitting_prompts(problems, None, rollout, logged.append, window=None, lengths=[3, 12, 10, 11])
    assert [p["id"] for p in kept] == ["0", "2"] and logged == ["rl: dropped 2 prompts longer than 10 tokens"]
