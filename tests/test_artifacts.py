"""Artifact store: keys, up-to-date, partial directories, resume after SIGKILL, verify, lineage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ares_cli.errors import IntegrityError, StageFailure, StageLocked
from ares_cli.store.artifacts import ArtifactStore, InputRef, stage_key
from ares_cli.store.rowlog import RowLog


def _open(store, config=None, inputs=(), force=False):
    return store.open_stage(
        "demo",
        code_version="1",
        config=config or {"k": 8},
        inputs=list(inputs),
        seeds={"seed": 0},
        argv=["test"],
        force=force,
    )


def test_key_depends_on_config_code_and_inputs_not_order():
    a = InputRef("data", "x", "aa")
    b = InputRef("model", "y", "bb")
    base = stage_key("s", "1", {"k": 8}, [a, b])
    assert base == stage_key("s", "1", {"k": 8}, [b, a])
    assert base != stage_key("s", "2", {"k": 8}, [a, b])
    assert base != stage_key("s", "1", {"k": 4}, [a, b])
    assert base != stage_key("s", "1", {"k": 8}, [a, InputRef("model", "y", "cc")])
    assert len(base) == 12


def test_finalize_writes_manifest_last_and_is_up_to_date(tmp_path):
    store = ArtifactStore(tmp_path)
    run = _open(store)
    assert not run.up_to_date and run.work_dir.name.endswith(".partial")
    rows = run.rows("rows.jsonl", ("i",))
    rows.write([{"i": 2}, {"i": 1}])
    path = run.finalize({"n": 2})
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["stats"] == {"n": 2}
    assert manifest["outputs"] == [
        {
            "path": "rows.jsonl",
            "sha256": manifest["outputs"][0]["sha256"],
            "bytes": (path / "rows.jsonl").stat().st_size,
            "rows": 2,
        }
    ]
    for key in (
        "schema_version",
        "artifact_id",
        "created",
        "git",
        "argv",
        "config",
        "config_hash",
        "seeds",
        "inputs",
        "environment",
        "ares_version",
    ):
        assert key in manifest
    assert [json.loads(x)["i"] for x in (path / "rows.jsonl").read_text().splitlines()] == [1, 2]
    assert not run.work_dir.exists()
    again = _open(store)
    assert again.up_to_date and again.final_dir == path
    assert _open(store, config={"k": 4}).up_to_date is False


def test_rowlog_refuses_duplicates_and_drops_torn_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"i": 0}\n{"i": 1}\n{"i": 2')  # killed mid-line
    log = RowLog(path, ("i",))
    assert len(log) == 2 and (2,) not in log
    log.write([{"i": 2}])
    with pytest.raises(StageFailure):
        log.write([{"i": 1}])
    log.close()
    assert [json.loads(x)["i"] for x in path.read_text().splitlines()] == [0, 1, 2]


WRITER = textwrap.dedent(
    """
    import sys, time
    from ares_cli.store.artifacts import ArtifactStore
    store = ArtifactStore(sys.argv[1])
    run = store.open_stage("demo", code_version="1", config={"n": 40}, inputs=[])
    if run.up_to_date:
        print("up to date"); sys.exit(0)
    log = run.rows("rows.jsonl", ("i",))
    for i in range(40):
        if (i,) in log:
            continue
        log.write([{"i": i, "square": i * i}])
        time.sleep(float(sys.argv[2]))
    print(run.finalize({"rows": len(log)}))
    """
)


def test_killed_stage_never_looks_complete_and_resume_writes_each_row_once(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    root = tmp_path / "store"
    proc = subprocess.Popen([sys.executable, str(script), str(root), "0.05"])
    partial = root / "demo"
    deadline = time.time() + 60
    while time.time() < deadline:
        files = list(partial.glob("*.partial/rows.jsonl"))
        if files and len(files[0].read_text().splitlines()) >= 5:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = ArtifactStore(root)
    listed = store.list()
    assert [e["status"] for e in listed] == ["partial"]
    assert not list(root.glob("demo/*/manifest.json"))
    done = subprocess.run([sys.executable, str(script), str(root), "0"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    final = Path(done.stdout.strip())
    rows = [json.loads(x) for x in (final / "rows.jsonl").read_text().splitlines()]
    assert [r["i"] for r in rows] == list(range(40))
    assert all(r["square"] == r["i"] ** 2 for r in rows)
    rerun = subprocess.run([sys.executable, str(script), str(root), "0"], capture_output=True, text=True)
    assert rerun.stdout.strip() == "up to date"


def test_verify_catches_a_flipped_byte(tmp_path):
    store = ArtifactStore(tmp_path)
    run = _open(store)
    (run.work_dir / "weights.bin").write_bytes(bytes(range(256)))
    path = run.finalize()
    assert store.verify(path)["status"] == "ok"
    data = bytearray((path / "weights.bin").read_bytes())
    data[100] ^= 0x01
    (path / "weights.bin").write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match="weights.bin"):
        store.verify(run.artifact_id)


def test_lineage_follows_artifact_inputs(tmp_path):
    store = ArtifactStore(tmp_path)
    data_file = tmp_path / "d.jsonl"
    data_file.write_text('{"id": 1}\n')
    first = store.open_stage("a", code_version="1", config={}, inputs=[store.input_ref("data", data_file)])
    first_path = first.finalize()
    second = store.open_stage(
        "b", code_version="1", config={}, inputs=[store.input_ref("upstream", first_path)]
    )
    second.finalize()
    tree = store.lineage(second.artifact_id)
    assert tree["inputs"][0]["artifact_id"] == first.artifact_id
    assert tree["inputs"][0]["inputs"][0]["path"] == str(data_file)


def test_force_rebuilds_and_lock_blocks_concurrent_run(tmp_path):
    store = ArtifactStore(tmp_path)
    run = _open(store)
    with pytest.raises(StageLocked, match=rf"locked by another running 'demo' \(pid {os.getpid()}\)") as held:
        _open(store)
    assert held.value.exit_code == 75
    run.finalize()
    forced = _open(store, force=True)
    assert not forced.up_to_date and not forced.resumed
    forced.finalize()


def test_a_run_whose_partial_directory_was_replaced_publishes_nothing(tmp_path):
    import shutil

    store = ArtifactStore(tmp_path)
    run = _open(store)
    run.rows("rows.jsonl", ("i",)).write([{"i": 1}])
    shutil.rmtree(run.work_dir)  # removed underneath the run; another run starts over in its place
    other = _open(store)
    with pytest.raises(StageLocked, match="lost the lock"):
        run.finalize()
    assert not run.final_dir.exists()
    assert not (other.work_dir / "rows.jsonl").exists()  # the lost run wrote nothing into the new one
    other.finalize()
    assert store.verify(other.artifact_id)["status"] == "ok"
