"""The fault table: damaged stores, full and read-only disks, lost locks, each through the real CLI.

Every row starts from a copy of one small store (toy-init model, passrate, eval, curate), applies one fault
and runs one command: a tampered input must be refused with exit 4 naming the file, the store must stay
usable around a corrupt manifest, a full or read-only disk must give one line and exit 1 with the finished
work kept, and a run that loses its stage lock must say so with exit 75.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TOY_EVAL, TOY_PASSRATE
from typer.testing import CliRunner

from ares_cli.main import app

pytest.importorskip("torch")

PASSRATE, EVAL = TOY_PASSRATE, TOY_EVAL  # the toy store's own stage arguments (conftest)


def ares(root: Path, *args: str):
    return CliRunner().invoke(app, ["--artifacts-root", str(root), "--json", *args])


@pytest.fixture
def store(toy_store, tmp_path):
    """A copy of the toy store (toy-init model, passrate, eval, curate; ids by stage) for one fault."""
    root, ids = toy_store
    shutil.copytree(root, tmp_path / "artifacts")
    return tmp_path / "artifacts", dict(ids)


def _dir(root: Path, artifact_id: str) -> Path:
    return next(root.glob(f"*/{artifact_id}"))


def _flip(path: Path, offset: int = -100) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _drop_last_row(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))


@dataclass
class Fault:
    name: str
    damage: Callable[[Path, dict], None]
    argv: list[str]
    exit_code: int
    message: str


TAMPERED_INPUTS = [
    Fault("model bytes flipped -> eval", lambda r, i: _flip(_dir(r, i["toy-init"]) / "model/model.safetensors"),
          [*EVAL, "--model", "{toy-init}"], 4, "model.safetensors: sha256 does not match"),
    Fault("model bytes flipped -> eval of its model/ dir",
          lambda r, i: _flip(_dir(r, i["toy-init"]) / "model/model.safetensors"),
          [*EVAL, "--model", "{toy-init-dir}/model"], 4, "model.safetensors: sha256 does not match"),
    Fault("model config deleted -> passrate", lambda r, i: (_dir(r, i["toy-init"]) / "model/config.json").unlink(),
          [*PASSRATE, "--model", "{toy-init}"], 4, "config.json: missing"),
    Fault("file planted in a model -> rl", lambda r, i: (_dir(r, i["toy-init"]) / "model/extra.bin").write_bytes(b"x"),
          ["rl", "--model", "{toy-init}", "--data", "toy-train"], 4, "extra.bin: not listed in the manifest"),
    Fault("passrate row removed -> curate", lambda r, i: _drop_last_row(_dir(r, i["passrate"]) / "samples.jsonl"),
          ["curate", "--passrate", "{passrate}"], 4, "samples.jsonl:"),
    Fault("passrate row edited in place -> curate",
          lambda r, i: _flip(_dir(r, i["passrate"]) / "passrates.jsonl", offset=5),
          ["curate", "--passrate", "{passrate}"], 4, "passrates.jsonl: sha256 does not match"),
    Fault("passrate file as --passrates -> curate",
          lambda r, i: _drop_last_row(_dir(r, i["passrate"]) / "passrates.jsonl"),
          ["curate", "--passrates", "{passrate-dir}/passrates.jsonl", "--data", "toy-train"], 4, "passrates.jsonl:"),
    Fault("passrate tampered -> eval --difficulty-from",
          lambda r, i: _flip(_dir(r, i["passrate"]) / "passrates.jsonl", offset=5),
          [*EVAL, "--model", "{toy-init}", "--difficulty-from", "{passrate}"], 4, "passrates.jsonl"),
    Fault("eval samples tampered -> eval --regrade", lambda r, i: _flip(next(_dir(r, i["eval"]).glob("samples/*.jsonl")), 3),
          ["eval", "--regrade", "{eval}"], 4, "samples/toy-val.jsonl: sha256 does not match"),
    Fault("eval results tampered -> report compare",
          lambda r, i: _flip(_dir(r, i["eval"]) / "results.json", offset=2),
          ["report", "compare", "a={eval}", "b={eval-dir}"], 4, "results.json: sha256 does not match"),
    Fault("curate set tampered -> sft", lambda r, i: _drop_last_row(_dir(r, i["curate"]) / "sft.jsonl"),
          ["sft", "--model", "{toy-init}", "--data", "{curate}"], 4, "sft.jsonl:"),
    Fault("input manifest corrupt -> curate", lambda r, i: (_dir(r, i["passrate"]) / "manifest.json").write_text("{"),
          ["curate", "--passrate", "{passrate}"], 4, "manifest.json: corrupt manifest"),
    Fault("input manifest lists a path outside -> eval",
          lambda r, i: _rewrite_manifest(_dir(r, i["toy-init"]), "../../../etc/passwd"),
          [*EVAL, "--model", "{toy-init}"], 4, "leaves the artifact directory"),
]  # fmt: skip


def _rewrite_manifest(directory: Path, first_path: str) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["outputs"][0]["path"] = first_path
    (directory / "manifest.json").write_text(json.dumps(manifest))


def _argv(argv: list[str], root: Path, ids: dict) -> list[str]:
    paths = {f"{stage}-dir": str(_dir(root, artifact_id)) for stage, artifact_id in ids.items()}
    return [a.format(**ids, **paths) for a in argv]


@pytest.mark.parametrize("fault", TAMPERED_INPUTS, ids=lambda f: f.name)
def test_a_tampered_input_is_refused_with_exit_4_naming_the_file(store, fault):
    root, ids = store
    fault.damage(root, ids)
    before = sorted(p.name for p in root.glob("*/*"))
    result = ares(root, *_argv(fault.argv, root, ids))
    assert result.exit_code == fault.exit_code, result.output
    assert fault.message in result.stderr and "Traceback" not in result.output
    assert sorted(p.name for p in root.glob("*/*")) == before  # nothing produced from the bad input


def test_a_tampered_model_is_refused_even_when_its_eval_is_up_to_date(store):
    root, ids = store
    _flip(_dir(root, ids["toy-init"]) / "model/model.safetensors")
    result = ares(root, *EVAL, "--model", ids["toy-init"])  # same key as the stored eval: must not say done
    assert result.exit_code == 4 and "up_to_date" not in result.stdout


def test_the_store_stays_usable_around_a_corrupt_manifest(store):
    root, ids = store
    (_dir(root, ids["eval"]) / "manifest.json").write_text('{"artifact_id": 3')
    listed = ares(root, "artifacts", "ls")
    assert listed.exit_code == 0 and "corrupt manifest" in listed.stderr
    status = {e["artifact_id"]: e["status"] for e in json.loads(listed.stdout)["artifacts"]}
    assert status[ids["eval"]] == "corrupt" and status[ids["passrate"]] == "complete"
    verified = ares(root, "artifacts", "verify")
    assert verified.exit_code == 4 and "1 of 4 artifact(s) failed" in verified.stderr
    assert sum(r["status"] == "ok" for r in json.loads(verified.stdout)["verified"]) == 3
    curated = ares(root, "curate", "--passrate", ids["passrate"], "--per-bracket", "2")
    assert curated.exit_code == 0  # an artifact whose own manifest is fine is unaffected


class _FillingDisk:
    """A file handle on a disk that fills up: the next write lands a torn prefix, then raises ``code``."""

    def __init__(self, handle, code: int):
        self.handle, self.code = handle, code

    def write(self, text: str) -> int:
        self.handle.write(text[:20])
        self.handle.flush()
        raise OSError(self.code, os.strerror(self.code))

    def __getattr__(self, name):
        return getattr(self.handle, name)


def _fail_second_write(monkeypatch, code: int):
    """The second batch of rows a RowLog writes hits a full (or read-only) disk."""
    from ares_cli.store.rowlog import RowLog

    original, calls = RowLog.write, []

    def write(self, rows):
        calls.append(len(rows))
        if len(calls) == 2:
            self._handle = _FillingDisk(self._handle, code)
        return original(self, rows)

    monkeypatch.setattr(RowLog, "write", write)


def _failed(result) -> tuple[int, str]:
    """(exit code, stderr), dropping the in-process traceback that still holds the failed run's lock."""
    outcome = result.exit_code, result.stderr
    del result
    gc.collect()
    return outcome


@pytest.mark.parametrize(
    "code, what", [(errno.ENOSPC, "no space left on device"), (errno.EROFS, "read-only")]
)
def test_a_disk_failing_mid_stage_exits_1_keeps_the_finished_rows_and_resumes(store, monkeypatch, code, what):
    root, ids = store
    shutil.rmtree(_dir(root, ids["passrate"]))
    _fail_second_write(monkeypatch, code)
    code, stderr = _failed(ares(root, *PASSRATE, "--model", ids["toy-init"]))
    assert code == 1 and "Traceback" not in stderr
    assert f"samples.jsonl: {what}" in stderr and "rerun the same command" in stderr
    partial = root / "passrate" / f"{ids['passrate']}.partial"
    assert len((partial / "samples.jsonl").read_text().splitlines()) == 3  # 2 rows + the torn line
    monkeypatch.undo()
    resumed = ares(root, *PASSRATE, "--model", ids["toy-init"])
    assert resumed.exit_code == 0 and "already graded" in resumed.stderr
    assert json.loads(resumed.stdout)["artifact_id"] == ids["passrate"]
    assert ares(root, "artifacts", "verify", ids["passrate"]).exit_code == 0


def test_a_full_disk_while_writing_the_manifest_leaves_no_stray_file(store, monkeypatch):
    root, ids = store
    shutil.rmtree(_dir(root, ids["curate"]))
    real_write_text = Path.write_text

    def full(self, *a, **kw):
        if self.name == "manifest.json.tmp":
            real_write_text(self, "{", encoding="utf-8")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write_text(self, *a, **kw)

    monkeypatch.setattr(Path, "write_text", full)
    code, stderr = _failed(ares(root, "curate", "--passrate", ids["passrate"], "--per-bracket", "2"))
    assert code == 1 and "manifest.json.tmp: no space left on device" in stderr
    partial = root / "curate" / f"{ids['curate']}.partial"
    assert (partial / "sft.jsonl").is_file() and not (partial / "manifest.json.tmp").exists()
    monkeypatch.undo()
    assert ares(root, "curate", "--passrate", ids["passrate"], "--per-bracket", "2").exit_code == 0
    assert ares(root, "artifacts", "verify", ids["curate"]).exit_code == 0


def test_a_read_only_artifacts_root_exits_1_with_one_line(store, monkeypatch):
    root, ids = store
    real_mkdir = Path.mkdir

    def read_only(self, *a, **kw):
        if root in self.absolute().parents:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *a, **kw)

    monkeypatch.setattr(Path, "mkdir", read_only)
    result = ares(root, *PASSRATE, "--model", ids["toy-init"], "--force")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "read-only file system (errno 30)" in result.stderr and str(root / "passrate") in result.stderr


def test_a_held_stage_lock_exits_75(store):
    import fcntl

    root, ids = store
    partial = root / "passrate" / f"{ids['passrate']}.partial"
    partial.mkdir()
    with open(partial / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        result = ares(root, *PASSRATE, "--model", ids["toy-init"], "--force")
    assert result.exit_code == 75 and "locked by another running 'passrate' (pid 4242)" in result.stderr


def test_losing_the_stage_lock_mid_run_exits_75_and_publishes_nothing(store, monkeypatch):
    from ares_cli.stages import passrate

    root, ids = store
    shutil.rmtree(_dir(root, ids["passrate"]))
    original = passrate._finish

    def replaced_underneath(run, *a, **kw):
        shutil.rmtree(run.work_dir)  # someone removed the partial directory, another run started over
        run.work_dir.mkdir()
        (run.work_dir / ".lock").write_text("")
        for name in ("problems.jsonl", "samples.jsonl"):
            (run.work_dir / name).write_text("")
        return original(run, *a, **kw)

    monkeypatch.setattr(passrate, "_finish", replaced_underneath)
    result = ares(root, *PASSRATE, "--model", ids["toy-init"])
    assert result.exit_code == 75 and "lost the lock" in result.stderr
    assert not _dir_exists(root, ids["passrate"])


def _dir_exists(root: Path, artifact_id: str) -> bool:
    return (root / "passrate" / artifact_id).exists()


def test_stage_files_get_the_umask_permissions(store):
    root, ids = store
    old = os.umask(0o022)
    try:
        shutil.rmtree(_dir(root, ids["passrate"]))
        assert ares(root, *PASSRATE, "--model", ids["toy-init"]).exit_code == 0
    finally:
        os.umask(old)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in _dir(root, ids["passrate"]).iterdir()}
    assert modes["problems.jsonl"] == modes["passrates.jsonl"] == modes["manifest.json"] == "0o644", modes


def test_a_full_disk_while_checkpointing_keeps_the_earlier_checkpoints_and_resumes(
    tiny_chars_model_dir, tmp_path, monkeypatch
):
    import safetensors.torch
    from fixtures_tiny_model import write_sft_jsonl
    from safetensors import SafetensorError

    from ares_cli.training import checkpoint

    model, data = tiny_chars_model_dir, write_sft_jsonl(tmp_path / "sft.jsonl", 16)
    argv = ["sft", "--model", str(model), "--data", str(data), "--epochs", "2", "--batch-size", "8",
            "--set", "save_every=1", "--set", "micro_batch_size=4", "--set", "max_seq_len=96"]  # fmt: skip
    real_save_file = safetensors.torch.save_file

    def filling(tensors, filename, *a, **kw):
        if "step-000003.tmp" in str(filename):  # safetensors reports the OS error inside its own exception
            raise SafetensorError(
                f'Error while serializing: I/O error: No space left on device (os error 28) at path "{filename}"'
            )
        return real_save_file(tensors, filename, *a, **kw)

    monkeypatch.setattr(safetensors.torch, "save_file", filling)
    code, stderr = _failed(ares(tmp_path / "artifacts", *argv))
    assert code == 1 and "Traceback" not in stderr
    assert "step-000003.tmp/model.safetensors: no space left on device (errno 28)" in stderr
    checkpoints = next((tmp_path / "artifacts" / "sft").glob("*.partial")) / "checkpoints"
    assert checkpoint.latest(checkpoints).name == "step-000002"  # the earlier checkpoints are intact
    monkeypatch.undo()
    resumed = ares(tmp_path / "artifacts", *argv)
    assert resumed.exit_code == 0 and "resuming from step-000002" in resumed.stderr


def test_a_full_disk_under_write_jsonl_names_the_file_and_leaves_no_temp_file(tmp_path):
    from ares_cli.data.jsonl import write_jsonl
    from ares_cli.errors import storage_error

    def rows():
        yield {"i": 1}
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what the file write raises on a full disk

    with pytest.raises(OSError) as err:
        write_jsonl(tmp_path / "problems.jsonl", rows())
    assert list(tmp_path.iterdir()) == []
    message = str(storage_error(err.value))
    assert message.startswith(
        f"cannot write {tmp_path / 'problems.jsonl'}: no space left on device (errno 28)"
    )
