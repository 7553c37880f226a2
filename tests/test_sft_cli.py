"""`ares sft` end to end: artifact, up to date, automatic resume after a kill, artifact-id inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fixtures_tiny_model import write_sft_jsonl  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from ares_cli.main import app  # noqa: E402

FAST = ["--set", "lr=1e-3", "--set", "micro_batch_size=2", "--set", "max_seq_len=96", "--batch-size", "8"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_chars_model_dir):
    root = tmp_path_factory.mktemp("tiny_cli")
    return tiny_chars_model_dir, write_sft_jsonl(root / "sft.jsonl", 16)


def _sft(root, *args):
    return CliRunner().invoke(app, ["--artifacts-root", str(root), "--json", "sft", *args, *FAST])


def test_help():
    result = CliRunner().invoke(app, ["sft", "--help"])
    assert result.exit_code == 0 and "--model" in result.output and "--deepspeed" in result.output


def test_sft_artifact_then_up_to_date(tiny, tmp_path):
    model, data = tiny
    first = _sft(tmp_path, "--model", str(model), "--data", str(data), "--max-steps", "2")
    assert first.exit_code == 0, first.output
    out = json.loads(first.stdout)
    manifest = json.loads((tmp_path / "sft" / out["artifact_id"] / "manifest.json").read_text())
    assert manifest["stats"]["steps"] == 2 and manifest["stats"]["tokens"] > 0
    assert {"final_loss", "tokens_per_s", "response_tokens"} <= set(manifest["stats"])
    assert [i["role"] for i in manifest["inputs"]] == ["model", "data"]
    assert not any(o["path"].startswith("checkpoints/") for o in manifest["outputs"])
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out["path"] + "/model")
    again = _sft(tmp_path, "--model", str(model), "--data", str(data), "--max-steps", "2")
    assert again.exit_code == 0 and json.loads(again.stdout)["up_to_date"] is True
    changed = _sft(tmp_path, "--model", str(model), "--data", str(data), "--max-steps", "2", "--lr", "5e-4")
    assert json.loads(changed.stdout)["artifact_id"] != out["artifact_id"]


def test_killed_run_resumes_automatically(tiny, tmp_path, monkeypatch):
    model, data = tiny
    args = ["--model", str(model), "--data", str(data), "--epochs", "2", "--set", "save_every=1",
            "--report-to", "tensorboard"]  # fmt: skip
    reference = _sft(tmp_path / "ref", *args)
    assert reference.exit_code == 0, reference.output

    from ares_cli.training import sft

    original = sft.train_sft

    def killed(*a, **kw):
        original(*a, **kw, stop_after=3)
        raise KeyboardInterrupt

    monkeypatch.setattr(sft, "train_sft", killed)
    interrupted = _sft(tmp_path / "run", *args)
    assert interrupted.exit_code == 130
    partial = next((tmp_path / "run" / "sft").glob("*.partial"))
    assert sorted(p.name for p in (partial / "checkpoints").iterdir()) == ["step-000002", "step-000003"]
    monkeypatch.setattr(sft, "train_sft", original)
    resumed = _sft(tmp_path / "run", *args)
    assert resumed.exit_code == 0, resumed.output
    assert "resuming" in resumed.stderr
    from safetensors.torch import load_file

    a = load_file(json.loads(reference.stdout)["path"] + "/model/model.safetensors")
    b = load_file(json.loads(resumed.stdout)["path"] + "/model/model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    # the per-step metrics continue the killed run's curves: every step once, the same losses as uninterrupted
    from test_tracking import _assert_same_curves, _rows

    ref_dir, run_dir = (Path(json.loads(r.stdout)["path"]) for r in (reference, resumed))
    ref_rows, run_rows = _rows(ref_dir / "metrics.jsonl"), _rows(run_dir / "metrics.jsonl")
    assert [r["step"] for r in run_rows] == list(range(1, len(ref_rows) + 1))
    assert [r["loss"] for r in run_rows] == pytest.approx([r["loss"] for r in ref_rows], abs=1e-6)
    assert [s for s, _ in _assert_same_curves(run_dir)["loss"]] == [r["step"] for r in run_rows]


def test_artifact_ids_as_inputs(tiny, tmp_path):
    from ares_cli.store.artifacts import ArtifactStore

    model, data = tiny
    store = ArtifactStore(tmp_path)
    run = store.open_stage("curate", code_version="test", config={}, inputs=[])
    (run.work_dir / "sft.jsonl").write_bytes(data.read_bytes())
    curate_dir = run.finalize({})
    first = _sft(tmp_path, "--model", str(model), "--data", curate_dir.name, "--max-steps", "1")
    assert first.exit_code == 0, first.output
    sft_id = json.loads(first.stdout)["artifact_id"]
    second = _sft(tmp_path, "--model", sft_id, "--data", curate_dir.name, "--max-steps", "1")
    assert second.exit_code == 0, second.output
    manifest = store.manifest(json.loads(second.stdout)["artifact_id"])
    assert {i["role"]: i["artifact_id"] for i in manifest["inputs"]} == {
        "model": sft_id,
        "data": curate_dir.name,
    }


def test_bad_inputs_exit_3(tiny, tmp_path):
    model, _ = tiny
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": 1}\n')
    assert _sft(tmp_path, "--model", str(model), "--data", str(bad)).exit_code == 3
    assert _sft(tmp_path, "--model", str(tmp_path / "nope"), "--data", str(bad)).exit_code == 3
