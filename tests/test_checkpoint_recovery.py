"""Checkpoints are sealed with their sha256; a damaged newest one sends a run back to the previous one."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from ares_cli.training import checkpoint  # noqa: E402


def _save(root, step, value=0.0):
    return checkpoint.save(
        root,
        step,
        model_state={"w": torch.full((4,), float(value))},
        optimizer_state={"torch": {"step": step}},
        meta={"step": step, "world_size": 1},
        rank=0,
    )


def _flip(path, old: bytes, new: bytes):
    path.write_bytes(path.read_bytes().replace(old, new))


def _truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_the_previous_checkpoint_is_kept_and_every_file_is_listed(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path, step)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000002", "step-000003"]
    listed = json.loads((tmp_path / "step-000003" / "files.rank0.json").read_text())
    assert set(listed) == {
        "model.safetensors", "model.aliases.json", "optimizer.rank0.safetensors", "optimizer.rank0.json",
        "rng.rank0.safetensors", "rng.rank0.json", "state.json",
    }  # fmt: skip
    assert checkpoint.latest(tmp_path).name == "step-000003"


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda d: _truncate(d / "model.safetensors"), "model.safetensors has"),
        (lambda d: _truncate(d / "optimizer.rank0.safetensors", 0.9), "optimizer.rank0.safetensors has"),
        (lambda d: (d / "rng.rank0.json").unlink(), "rng.rank0.json missing"),
        (lambda d: (d / "files.rank0.json").write_text("{"), "files.rank0.json missing or unreadable"),
        (lambda d: (d / "state.json").write_text('{"step": 3'), "state.json does not match its sha256"),
        (lambda d: (d / "state.json").unlink(), "state.json missing or unreadable"),
        (
            lambda d: _flip(d / "state.json", b'"step": 3', b'"step": 9'),
            "state.json does not match its sha256",
        ),
        (lambda d: (d / "model.aliases.json").write_text("{} "), "model.aliases.json has"),
    ],
)
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(tmp_path, damage, reason):
    _save(tmp_path, 2, value=2)
    _save(tmp_path, 3, value=3)
    damage(tmp_path / "step-000003")
    messages = []
    assert checkpoint.latest(tmp_path, messages.append).name == "step-000002"
    assert len(messages) == 1 and "step-000003 is damaged" in messages[0] and reason in messages[0]
    model_state, _, meta = checkpoint.load(tmp_path / "step-000002", 0)
    assert meta["step"] == 2 and model_state["w"][0].item() == 2


def test_same_size_bit_flip_is_caught_by_the_hash(tmp_path):
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    path = tmp_path / "step-000002" / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    assert checkpoint.latest(tmp_path, lambda _m: None).name == "step-000001"


def test_rewriting_a_damaged_step_replaces_it_and_prunes_newer_ones(tmp_path):
    for step in (1, 2, 3):
        _save(tmp_path, step)
    _truncate(tmp_path / "step-000003" / "model.safetensors")
    (tmp_path / "step-000004.tmp").mkdir()  # a save killed midway
    resumed = checkpoint.latest(tmp_path, lambda _m: None)
    assert resumed.name == "step-000002"
    _save(tmp_path, 3, value=7)  # the resumed run reaches step 3 again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000002", "step-000003"]
    assert checkpoint.latest(tmp_path).name == "step-000003"
    assert checkpoint.load(tmp_path / "step-000003", 0)[0]["w"][0].item() == 7


def test_no_good_checkpoint_means_a_fresh_start(tmp_path):
    _save(tmp_path, 1)
    _truncate(tmp_path / "step-000001" / "model.safetensors")
    assert checkpoint.latest(tmp_path, lambda _m: None) is None


def test_sft_resumes_from_the_previous_checkpoint_when_the_newest_is_truncated(
    tiny_chars_model_dir, tmp_path
):
    pytest.importorskip("transformers")
    from fixtures_tiny_model import write_sft_jsonl

    from ares_cli.training.sft import SFTConfig, train_sft

    model_dir, data = tiny_chars_model_dir, write_sft_jsonl(tmp_path / "sft.jsonl", 16)
    cfg = SFTConfig(epochs=2, lr=1e-3, batch_size=8, micro_batch_size=4, max_seq_len=96, save_every=1)
    kw = dict(model_path=model_dir, data_path=data)
    full = train_sft(cfg, **kw, out_dir=tmp_path / "full", log=lambda _m: None)
    part = train_sft(cfg, **kw, out_dir=tmp_path / "run", log=lambda _m: None, stop_after=3)
    assert not part.complete
    _truncate(tmp_path / "run" / "checkpoints" / "step-000003" / "model.safetensors")
    messages = []
    resumed = train_sft(cfg, **kw, out_dir=tmp_path / "run", log=messages.append)
    assert resumed.complete and resumed.stats["steps"] == full.stats["steps"] == 4
    assert any("step-000003 is damaged" in m for m in messages)
    assert any("resuming from step-000002" in m for m in messages)
    assert resumed.stats["final_loss"] == full.stats["final_loss"]


def test_rl_resumes_from_the_previous_checkpoint_when_the_newest_is_truncated(tiny_model_dir, tmp_path):
    from test_rl import _cfg, _problems, _rows

    from ares_cli.training.rl.trainer import train_rl

    def train(cfg, out, log=lambda _m: None):
        return train_rl(
            cfg, model_path=tiny_model_dir, problems=_problems(), val_problems=None, out_dir=out, log=log
        )

    full = train(_cfg("steps=3", "save_every=1"), tmp_path / "full")
    stopped = train(_cfg("steps=3", "save_every=1", "max_steps_this_run=2"), tmp_path / "run")
    checkpoints = tmp_path / "run" / "checkpoints"
    assert not stopped.complete and sorted(p.name for p in checkpoints.iterdir()) == [
        "step-000001",
        "step-000002",
    ]
    _truncate(checkpoints / "step-000002" / "optimizer.rank0.safetensors")
    messages = []
    assert train(_cfg("steps=3", "save_every=1"), tmp_path / "run", messages.append).complete
    assert any("step-000002 is damaged" in m for m in messages)
    assert any("resuming from step-000001" in m for m in messages)
    done, ref = _rows(tmp_path / "run" / "metrics.jsonl"), _rows(tmp_path / "full" / "metrics.jsonl")
    assert [r["step"] for r in done] == [r["step"] for r in ref]  # step 2 rewritten once, not duplicated
    for a, b in zip(ref, done, strict=True):  # the resumed run reproduces the uninterrupted one
        for key in a:
            if not key.startswith("time/") and key != "tokens_per_s":
                assert b[key] == pytest.approx(a[key], abs=1e-6), (a["step"], key)
    assert full.complete
