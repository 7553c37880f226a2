"""`ares passrate`: records, buckets, resume after SIGKILL, shards + merge, up to date."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO, run_ares

from ares_cli.errors import InputError
from ares_cli.stages.passrate import (
    PassrateConfig,
    merge_shards,
    passrate_records,
    run_passrate,
    summary_stats,
)
from ares_cli.store.artifacts import ArtifactStore

ARGS = (  # fmt: skip
    "--data",
    "toy-train",
    "--limit",
    "8",
    "-k",
    "4",
    "--max-new-tokens",
    "24",
    "--grader",
    "boxed_int",
    "--set",
    "chunk_problems=2",
    "--set",
    "grade_workers=1",
)


def _sample(pid, idx, grade, n):
    return {"problem_id": pid, "sample_idx": idx, "grade": grade, "n_tokens": n}


def test_passrate_records_hand_computed():
    problems = [{"id": "a", "source": "s"}, {"id": "b", "source": "s"}]
    grades = ["correct"] * 6 + ["incorrect", "timeout"]
    samples = [_sample("a", i, g, 10 + i) for i, g in enumerate(grades)]
    samples += [_sample("b", i, "correct" if i < 2 else "incorrect", 20) for i in range(8)]
    records = passrate_records(problems, samples, PassrateConfig())
    assert records[0] == {
        "problem_id": "a",
        "source": "s",
        "k": 8,
        "n_correct": 6,
        "pass_rate": 0.75,
        "bucket": "easy",
        "len_mean": 13.5,
        "len_median": 13.5,
    }
    assert records[1]["bucket"] == "hard" and records[1]["pass_rate"] == 0.25
    stats = summary_stats(records, samples)["sources"]["s"]
    assert stats["histogram"] == {"2/8": 1, "6/8": 1}
    assert stats["bucket_fractions"] == {"easy": 0.5, "medium": 0.0, "hard": 0.5}
    assert stats["len_median_pass0"] is None and stats["length_cv_mean"] > 0


def _read(path):
    return path.read_text()


def test_killed_passrate_resumes_to_the_uninterrupted_rows(tiny_model_dir, tmp_path):
    straight = run_ares("passrate", "--model", str(tiny_model_dir), *ARGS, process=False, root=tmp_path / "a")
    reference = _read(Path(straight.stdout.strip()) / "samples.jsonl")
    root = tmp_path / "b"
    env = os.environ | {"ARES_ARTIFACTS": str(root)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from ares_cli.main import main; main()",
            "passrate",
            "--model",
            str(tiny_model_dir),
            *ARGS,
        ],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        files = list(root.glob("passrate/*.partial/samples.jsonl"))
        if files and len(files[0].read_text().splitlines()) >= 8:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = list(root.glob("passrate/*.partial/samples.jsonl"))[0]
    assert 8 <= len(partial.read_text().splitlines()) < 32
    assert not list(root.glob("passrate/*/manifest.json"))
    resumed = run_ares("passrate", "--model", str(tiny_model_dir), *ARGS, process=False, root=root)
    assert "resuming" in resumed.stderr
    final = Path(resumed.stdout.strip())
    assert _read(final / "samples.jsonl") == reference
    assert len(reference.splitlines()) == 32
    again = run_ares("passrate", "--model", str(tiny_model_dir), *ARGS, process=False, root=root)
    assert "up to date" in again.stderr and again.stdout.strip() == str(final)


def test_shards_merge_to_the_unsharded_rows(tiny_model_dir, tmp_path):
    store = ArtifactStore(tmp_path / "s")
    cfg = PassrateConfig(
        k=3, max_new_tokens=12, limit=5, grader="boxed_int", chunk_problems=2, grade_workers=1
    )
    quiet = {"log": lambda message: None}
    whole, _ = run_passrate(store, model=str(tiny_model_dir), data="toy-train", cfg=cfg, **quiet)
    shard_ids = []
    for i in range(2):
        shard_cfg = replace(cfg, shard=f"{i}/2")
        run, _ = run_passrate(store, model=str(tiny_model_dir), data="toy-train", cfg=shard_cfg, **quiet)
        shard_ids.append(run.artifact_id)
    merged, stats = merge_shards(store, shard_ids)
    for name in ("samples.jsonl", "passrates.jsonl", "problems.jsonl"):
        assert _read(merged.final_dir / name) == _read(whole.final_dir / name), name
    assert stats["merged_from"] == shard_ids
    with pytest.raises(InputError, match="do not cover"):
        merge_shards(store, shard_ids[:1])
