"""Pipelines as Make: unchanged stages do not rerun; a changed config reruns only its dependants."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_eval_stage import _write

from ares_cli.errors import InputError
from ares_cli.pipeline import load_pipeline, render

ARES = f"{sys.executable} -c 'from ares_cli.main import main; main()'"


def _spec(problems: Path, samples: Path, grader: str) -> dict:
    return {
        "name": "t",
        "stages": {
            "first": {"run": "eval", "args": {"data": str(problems), "from_samples": str(samples)},
                      "config": {"grade_workers": 1}},
            "second": {"run": "eval", "args": {"regrade": "@first"},  # boxed_int cannot read p1's gold 0.5
                       "config": {"grade_workers": 1, "grader": grader, "max_grade_error_rate": 0.5}},
        },
        "report": {"compare": {"first": "first", "second": "second"}},
    }  # fmt: skip


def _make(state: Path, root: Path) -> str:
    env = os.environ | {"ARES_ARTIFACTS": str(root)}
    proc = subprocess.run(
        ["make", "--no-print-directory", "-f", str(state / "Makefile"), "all"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_reruns_only_what_changed(tmp_path):
    problems, samples = _write(tmp_path)
    pipeline, state, root = tmp_path / "p.yaml", tmp_path / "state", tmp_path / "art"
    pipeline.write_text(yaml.safe_dump(_spec(problems, samples, "math_verify")))
    render(pipeline, state, ares=ARES)
    first_run = _make(state, root)
    assert "== first" in first_run and "== second" in first_run
    render(pipeline, state, ares=ARES)
    assert "==" not in _make(state, root)
    pipeline.write_text(yaml.safe_dump(_spec(problems, samples, "boxed_int")))
    render(pipeline, state, ares=ARES)
    changed = _make(state, root)
    assert "== second" in changed and "== first" not in changed
    second = json.loads((state / "second.id.json").read_text())
    assert second["avg@5"] == pytest.approx(0.1)
    from ares_cli.report.pipeline_report import load_run, markdown

    text = markdown(load_run(state))  # the spec is found from the state directory
    assert "| first |" in text and "rho(len,d)" in text
    assert load_run(state, pipeline).compare.keys() == {"first", "second"}


def test_load_pipeline_rejects_unknown_verbs_and_forward_refs(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"stages": {"a": {"run": "train"}}}))
    with pytest.raises(InputError, match="stages.a.run"):
        load_pipeline(bad)
    bad.write_text(
        yaml.safe_dump({"stages": {"a": {"run": "eval", "args": {"model": "@b"}}, "b": {"run": "eval"}}})
    )
    with pytest.raises(InputError, match="not an earlier stage"):
        load_pipeline(bad)
