"""Inputs are verified against their manifest; the verification record hashes an unchanged file once."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from ares_cli.errors import IntegrityError
from ares_cli.store import integrity
from ares_cli.store.artifacts import ArtifactStore


def _artifact(store, name="a", files=None, config=None):
    run = store.open_stage(name, code_version="1", config=config or {}, inputs=[], argv=["test"])
    for rel, data in (
        files or {"weights.bin": bytes(range(256)), "rows.jsonl": b'{"i": 1}\n{"i": 2}\n'}
    ).items():
        (run.work_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (run.work_dir / rel).write_bytes(data)
    return run.finalize()


@pytest.fixture
def hash_calls(monkeypatch):
    calls = []
    original = integrity.sha256_file

    def counting(path, **kw):
        calls.append(str(path))
        return original(path, **kw)

    monkeypatch.setattr(integrity, "sha256_file", counting)
    return calls


def test_an_unchanged_file_is_hashed_once_across_stores(tmp_path, hash_calls):
    path = _artifact(ArtifactStore(tmp_path))
    hash_calls.clear()
    ArtifactStore(tmp_path).verified(path)  # a new process: only the record file carries over
    first = len(hash_calls)
    ArtifactStore(tmp_path).verified(path)
    assert len(hash_calls) == first  # nothing re-read the second time
    assert first == 0  # the producing stage recorded the hashes it computed for its manifest


def test_a_changed_stat_is_hashed_again_and_rehash_reads_everything(tmp_path, hash_calls):
    path = _artifact(ArtifactStore(tmp_path))
    weights = path / "weights.bin"
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    hash_calls.clear()
    ArtifactStore(tmp_path).verified(path)
    assert hash_calls == [str(weights.absolute())]
    hash_calls.clear()
    ArtifactStore(tmp_path).verify(path)  # `ares artifacts verify`: every byte again
    assert len(hash_calls) == 2


def test_same_size_in_place_edit_with_restored_mtime_is_still_caught(tmp_path):
    path = _artifact(ArtifactStore(tmp_path))
    weights = path / "weights.bin"
    stat = weights.stat()
    data = bytearray(weights.read_bytes())
    data[10] ^= 0xFF
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # size and mtime as before; ctime moved
    with pytest.raises(IntegrityError, match="weights.bin: sha256 does not match"):
        ArtifactStore(tmp_path).input_ref("x", path)


def test_a_malformed_record_is_ignored(tmp_path, hash_calls):
    path = _artifact(ArtifactStore(tmp_path))
    (tmp_path / integrity.RECORD_FILE).write_text("{not json")
    hash_calls.clear()
    ArtifactStore(tmp_path).verified(path)
    assert len(hash_calls) == 2
    assert json.loads((tmp_path / integrity.RECORD_FILE).read_text())["files"]  # rewritten whole


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda d: (d / "rows.jsonl").write_bytes(b'{"i": 1}\n'),
            "rows.jsonl: 9 bytes, the manifest records 18",
        ),
        (lambda d: (d / "rows.jsonl").unlink(), "rows.jsonl: missing"),
        (lambda d: (d / "extra.bin").write_bytes(b"x"), "extra.bin: not listed in the manifest"),
        (lambda d: (d / "manifest.json").write_text("[1]"), "corrupt manifest"),
        (lambda d: (d / "manifest.json").write_bytes(b"\xff\xfe"), "corrupt manifest"),
    ],
)
def test_input_ref_refuses_a_damaged_artifact(tmp_path, damage, message):
    path = _artifact(ArtifactStore(tmp_path))
    damage(path)
    with pytest.raises(IntegrityError, match=message) as err:
        ArtifactStore(tmp_path).input_ref("upstream", path.name)
    assert err.value.exit_code == 4


def test_a_file_inside_an_artifact_verifies_that_artifact(tmp_path):
    path = _artifact(ArtifactStore(tmp_path))
    (path / "weights.bin").write_bytes(b"\0" * 256)
    with pytest.raises(IntegrityError, match="weights.bin"):
        ArtifactStore(tmp_path).input_ref("rows", path / "rows.jsonl")  # the damaged file is a sibling


def test_manifest_paths_cannot_leave_the_artifact(tmp_path):
    path = _artifact(ArtifactStore(tmp_path))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["outputs"][0]["path"] = "../../elsewhere"
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IntegrityError, match="leaves the artifact directory"):
        ArtifactStore(tmp_path).verify(path)


def test_a_corrupt_manifest_does_not_hide_the_rest_of_the_store(tmp_path):
    store = ArtifactStore(tmp_path)
    good, bad = _artifact(store, "good"), _artifact(store, "bad")
    (bad / "manifest.json").write_text('{"artifact_id": ')
    entries = {e["artifact_id"]: e for e in store.list()}
    assert entries[good.name]["status"] == "complete"
    assert entries[bad.name]["status"] == "corrupt" and "manifest.json" in entries[bad.name]["error"]


def test_artifacts_verify_reports_each_failure_and_exits_4_at_the_end(tmp_path):
    from conftest import run_ares

    store = ArtifactStore(tmp_path)
    good, bad, tampered = _artifact(store, "good"), _artifact(store, "bad"), _artifact(store, "tampered")
    (bad / "manifest.json").write_text("")
    (tampered / "weights.bin").write_bytes(b"1")
    ls = run_ares("artifacts", "ls", process=False, root=tmp_path)
    assert good.name in ls.stdout and bad.name in ls.stdout and "corrupt manifest" in ls.stderr
    proc = run_ares("--json", "artifacts", "verify", process=False, root=tmp_path, check=False)
    assert proc.returncode == 4, proc.stderr
    status = {r["artifact_id"]: r["status"] for r in json.loads(proc.stdout)["verified"]}
    assert status == {good.name: "ok", bad.name: "failed", tampered.name: "failed"}
    assert "2 of 3 artifact(s) failed" in proc.stderr and "weights.bin" in proc.stderr


def test_a_manifest_copied_from_another_artifact_is_refused(tmp_path):
    store = ArtifactStore(tmp_path)
    good = _artifact(store, "a", {"w.bin": b"good"}, {"v": 1})
    other = _artifact(store, "a", {"w.bin": b"evil"}, {"v": 2})
    shutil.copy(other / "manifest.json", good / "manifest.json")
    shutil.copy(other / "w.bin", good / "w.bin")  # files and manifest agree, but under the wrong id
    with pytest.raises(IntegrityError, match=f"names artifact {other.name}, but lies in {good.name}"):
        ArtifactStore(tmp_path).input_ref("x", good.name)
    renamed = tmp_path.parent / f"{tmp_path.name}-copy" / "my-model"
    shutil.copytree(other, renamed)  # a copy under a name of the user's choosing still verifies
    assert ArtifactStore(tmp_path).input_ref("x", renamed).artifact_id == other.name
    from ares_cli.store.artifacts import verify_enclosing

    verify_enclosing(renamed / "w.bin")
    assert not (renamed.parent.parent / integrity.RECORD_FILE).exists()  # no record dropped outside a store


def test_lineage_shows_a_corrupt_upstream_manifest_and_goes_on(tmp_path):
    store = ArtifactStore(tmp_path)
    upstream = _artifact(store, "up")
    run = store.open_stage("down", code_version="1", config={}, inputs=[store.input_ref("u", upstream)])
    run.finalize()
    (upstream / "manifest.json").write_text("")
    tree = ArtifactStore(tmp_path).lineage(run.artifact_id)
    assert tree["artifact_id"] == run.artifact_id and "corrupt manifest" in tree["inputs"][0]["corrupt"]
