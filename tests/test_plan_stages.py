"""``ares plan sft|passrate|eval`` on the toy world: each runs the stage's preparation, sizes it and exits 0
without writing an artifact; beside each, an input the stage refuses, refused by the plan with its code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ares_cli.main import app

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
TOY = str(REPO / "ares_cli" / "toy" / "base")


def _plan(root: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["--artifacts-root", str(root), "--json", "plan", *args])
    return result.exit_code, json.loads(result.stdout)


def _no_artifact(root: Path) -> bool:
    return not root.exists() or not any(
        p.name == "manifest.json" or p.suffix == ".partial" for p in root.rglob("*")
    )


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory) -> Path:
    from fixtures_tiny_model import write_sft_jsonl

    return write_sft_jsonl(tmp_path_factory.mktemp("plan-sft") / "sft.jsonl", 12)


def test_plan_sft_sizes_the_step(tmp_path, sft_data):
    code, report = _plan(tmp_path, "sft", "--model", TOY, "--data", str(sft_data), "--batch-size", "4")
    assert code == 0, report
    assert report["estimate"]["fits"] and report["estimate"]["need_bytes"] > 0
    assert {c["name"] for c in report["checks"] if c["status"] == "ok"} >= {"config", "model", "data"}
    assert _no_artifact(tmp_path)


def test_plan_sft_refuses_a_missing_data_file(tmp_path):
    code, report = _plan(tmp_path, "sft", "--model", TOY, "--data", str(tmp_path / "missing.jsonl"))
    assert code == 3
    assert any(c["name"] == "data" and c["status"] == "fail" for c in report["checks"])


def test_plan_passrate_sizes_generation(tmp_path):
    code, report = _plan(
        tmp_path, "passrate", "--model", TOY, "--data", "toy-train", "--limit", "20", "-k", "4"
    )
    assert code == 0, report
    assert report["estimate"]["fits"]
    assert report["facts"]["prompts per source"][0]["problems"] == 20
    assert _no_artifact(tmp_path)


def test_plan_passrate_without_data_is_a_usage_error(tmp_path):
    code, report = _plan(tmp_path, "passrate", "--model", TOY)
    assert code == 2
    assert any(c["name"] == "options" and "--data" in c["detail"] for c in report["checks"])


def test_plan_eval_sizes_a_suite(tmp_path):
    code, report = _plan(tmp_path, "eval", "--model", TOY, "--suite", "toy", "--limit", "10")
    assert code == 0, report
    names = {c["name"] for c in report["checks"]}
    assert {"gold answers (toy-test)", "gold answers (toy-val)"} <= names
    assert report["estimate"]["fits"]
    assert _no_artifact(tmp_path)


def test_plan_eval_refuses_k_with_a_suite(tmp_path):
    code, report = _plan(tmp_path, "eval", "--model", TOY, "--suite", "toy", "-k", "4")
    assert code == 2
    suite = next(c for c in report["checks"] if c["name"] == "suite")
    assert suite["status"] == "fail" and "drop -k" in suite["detail"]
