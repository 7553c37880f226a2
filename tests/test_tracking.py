"""Trackers: TensorBoard holds the metrics.jsonl values under the same names; resumed curves continue."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_rl import _cfg, _train

from ares_cli.errors import UsageError
from ares_cli.training.tracking import MetricLog, parse_report_to, scalars


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _tensorboard(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _assert_same_curves(out: Path) -> dict[str, list[tuple[int, float]]]:
    rows, curves = _rows(out / "metrics.jsonl"), _tensorboard(out / "tensorboard")
    expected: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in scalars(row).items():
            expected.setdefault(key, []).append((row["step"], value))
    assert set(curves) == set(expected)
    for key, points in expected.items():
        assert [s for s, _ in curves[key]] == [s for s, _ in points], key
        assert [v for _, v in curves[key]] == pytest.approx([v for _, v in points], rel=1e-6), key
    return curves


def test_parse_report_to():
    assert parse_report_to(None) == ("jsonl",)
    assert parse_report_to("tensorboard") == ("jsonl", "tensorboard")
    assert parse_report_to(["jsonl,tensorboard", "tensorboard"]) == ("jsonl", "tensorboard")
    with pytest.raises(UsageError, match="unknown tracker 'mlflow'"):
        parse_report_to("jsonl,mlflow")


def test_missing_package_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(UsageError, match=r"pip install 'ares-cli\[wandb\]'"):
        parse_report_to("wandb")


def test_tensorboard_holds_the_metrics_of_a_toy_run(tiny_model_dir, tmp_path):
    from ares_cli.data.loader import load_problems

    val = load_problems("toy-val", limit=2).records
    assert _train(_cfg("algo=aepo", "val.every=1"), tiny_model_dir, tmp_path, val, ("jsonl", "tensorboard"))
    curves = _assert_same_curves(tmp_path)
    assert {"reward", "entropy", "aepo/threshold", "aepo/hard/kappa", "val/accuracy", "time/step"} <= set(
        curves
    )
    assert [s for s, _ in curves["val/accuracy"]] == [0, 1, 2]
    assert [s for s, _ in curves["reward"]] == [1, 2]


def test_resumed_run_continues_the_curves(tiny_model_dir, tmp_path):
    trackers = ("jsonl", "tensorboard")
    sets = ("algo=grpo", "steps=3", "save_every=1")
    assert not _train(_cfg(*sets, "max_steps_this_run=1"), tiny_model_dir, tmp_path, None, trackers).complete
    shutil.copytree(tmp_path / "checkpoints", tmp_path / "step-1")
    assert not _train(_cfg(*sets, "max_steps_this_run=2"), tiny_model_dir, tmp_path, None, trackers).complete
    # as if killed after logging step 2 but before its checkpoint: the resumed run redoes step 2
    shutil.rmtree(tmp_path / "checkpoints")
    shutil.move(tmp_path / "step-1", tmp_path / "checkpoints")
    assert _train(_cfg(*sets), tiny_model_dir, tmp_path, None, trackers).complete
    curves = _assert_same_curves(tmp_path)
    assert len(list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))) == 3
    for key in ("reward", "loss", "entropy"):
        assert [s for s, _ in curves[key]] == [1, 2, 3], key


def test_wandb_offline_run_records_config_and_artifact_id(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    log = MetricLog(tmp_path, resumed_step=0, is_main=True, report_to=("jsonl", "wandb"),
                    config={"algo": "aepo", "loss": {"clip_high": 0.28}}, run_id="rl-0123abcd")  # fmt: skip
    log.write({"step": 1, "reward": 0.5, "note": "text is not a scalar"})
    log.write({"step": 2, "reward": 0.75})
    log.close()
    (record,) = (tmp_path / "wandb").glob("offline-run-*-rl-0123abcd/run-rl-0123abcd.wandb")
    # protobuf records, where config keys and history values appear verbatim; all written by close()
    # (the artifact's files are hashed right after)
    data = record.read_bytes()
    words = (b"artifact_id", b"rl-0123abcd", b"clip_high", b"reward", b"0.75")
    assert [w for w in words if w not in data] == []
    assert b"text is not a scalar" not in data
    assert [r["step"] for r in _rows(tmp_path / "metrics.jsonl")] == [1, 2]


def test_other_ranks_log_nothing(tmp_path):
    log = MetricLog(tmp_path, resumed_step=0, is_main=False, report_to=("jsonl", "tensorboard"))
    log.write({"step": 1, "reward": 1.0})
    log.close()
    assert not list(tmp_path.iterdir())


ARGS = ("rl", "--data", "toy-train", "--val-data", "toy-val", "--algo", "grpo", "--steps", "2",
        "--set", "data_limit=8", "--set", "val.limit=2", "--set", "rollout.prompts_per_step=2",
        "--set", "rollout.group_size=2", "--set", "rollout.max_new_tokens=6", "--set", "optim.mini_batch_size=2",
        "--set", "grading.workers=1", "--set", "grading.grader=tests.test_rl_graders:parity_grade", "--trust-grader-code")  # fmt: skip


def test_cli_trackers_leave_a_verifiable_artifact(tiny_model_dir, tmp_path, monkeypatch):
    from conftest import run_ares

    monkeypatch.setenv("WANDB_MODE", "offline")
    bad = run_ares(
        *ARGS,
        "--model",
        str(tiny_model_dir),
        "--report-to",
        "jsonl,mlflow",
        process=False,
        root=tmp_path,
        check=False,
    )
    assert bad.returncode == 2 and "unknown tracker 'mlflow'" in bad.stderr
    path = Path(
        run_ares(
            *ARGS,
            "--model",
            str(tiny_model_dir),
            "--report-to",
            "tensorboard,wandb",
            process=False,
            root=tmp_path,
        ).stdout.strip()
    )
    _assert_same_curves(path)
    assert list(path.glob("wandb/offline-run-*/run-*.wandb"))
    verify = run_ares("artifacts", "verify", process=False, root=tmp_path, check=False)
    assert verify.returncode == 0, verify.stderr
