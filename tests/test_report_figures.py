"""Figures and the report page from a toy pipeline run: every plot family is a non-blank image; the page
is self-contained and a headless browser loads every image with no console error; `report pipeline`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from typer.testing import CliRunner

from ares_cli.main import app

ARES = f"{sys.executable} -c 'from ares_cli.main import main; main()'"
SAMPLE = {"max_new_tokens": 48, "temperature": 1.0, "top_p": 1.0}
RL = {"steps": 2, "data_limit": 16, "save_every": 0, "filter": {"mode": "off"}, "val": {"every": 1, "limit": 4},
      "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 48, "max_prompt_tokens": 128},
      "optim": {"mini_batch_size": 2, "micro_batch_size": 8}, "grading": {"workers": 1}}  # fmt: skip
SPEC = {
    "name": "tiny",
    "stages": {
        "base": {"run": "toy init"},
        "passrate": {"run": "passrate", "args": {"model": "@base", "data": "toy-train"},
                     "config": {"k": 4, "limit": 16, "grade_workers": 1, **SAMPLE}},
        "curate": {"run": "curate", "args": {"passrate": "@passrate"}, "config": {"mode": "length", "per_bracket": 4}},
        "sft": {"run": "sft", "args": {"model": "@base", "data": "@curate"},
                "config": {"max_steps": 2, "batch_size": 4, "micro_batch_size": 4, "max_seq_len": 160}},
        "rl_aepo": {"run": "rl", "args": {"model": "@sft", "data": "toy-train", "val_data": "toy-val"},
                    "config": {**RL, "algo": "aepo"}},
        "rl_paec": {"run": "rl", "args": {"model": "@sft", "data": "toy-train", "val_data": "toy-val"},
                    "config": {**RL, "algo": "paec"}},
        "eval_base": {"run": "eval", "args": {"model": "@base", "bench": "toy-test"},
                      "config": {"k": 4, "limit": 12, "grade_workers": 1, **SAMPLE}},
        "eval_aepo": {"run": "eval", "args": {"model": "@rl_aepo", "bench": "toy-test"},
                      "config": {"k": 4, "limit": 12, "grade_workers": 1, **SAMPLE}},
    },
    "report": {"compare": {"base": "eval_base", "aepo": "eval_aepo"}},
}  # fmt: skip

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("make") is None, reason="needs make")]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> tuple[Path, Path]:
    """(state directory, artifacts root) of the tiny toy pipeline, run through its Makefile."""
    from ares_cli.pipeline import render

    root = tmp_path_factory.mktemp("tiny-pipeline")
    spec, state, artifacts = root / "tiny.yaml", root / "state", root / "artifacts"
    spec.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    render(spec, state, ares=ARES)
    env = os.environ | {"ARES_ARTIFACTS": str(artifacts), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(["make", "--no-print-directory", "-f", str(state / "Makefile"), "all"], cwd=REPO,
                          capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return state, artifacts


def _artifact(state: Path, stage: str) -> str:
    return (state / f"{stage}.id").read_text().strip()


def _non_blank(path: Path) -> None:
    """A real figure: PNG of a plausible size with many distinct colours (not one flat fill)."""
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG" and image.width >= 400 and image.height >= 250, path
        pixels = image.convert("RGB").resize((200, 120))
        colours = pixels.getcolors(maxcolors=200 * 120)
        assert colours is not None and len(colours) > 30, path
        white = max(count for count, rgb in colours if rgb == (255, 255, 255))
        assert white < 0.97 * 200 * 120, path


def _plot(root: Path, out: Path, *refs: str) -> list[Path]:
    result = CliRunner().invoke(app, ["--artifacts-root", str(root), "--json", "report", "plot", *refs,
                                      "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    return [Path(p) for p in json.loads(result.stdout)["figures"]]


def test_every_plot_family_is_a_non_blank_image(pipeline, tmp_path):
    state, root = pipeline
    refs = [f"{name}={_artifact(state, name)}" for name in
            ("rl_aepo", "rl_paec", "sft", "passrate", "curate", "eval_base", "eval_aepo")]  # fmt: skip
    figures = _plot(root, tmp_path, *refs)
    stems = {p.stem for p in figures if p.suffix == ".png"}
    expected = {"rl_aepo-training", "rl_aepo-aepo", "rl_paec-training", "rl_paec-paec", "rl-compared",
                "sft-sft", "passrate-passrate", "curate-length_vs_passrate", "eval_base-eval_aepo-toy-test"}  # fmt: skip
    assert expected <= stems, stems
    assert {p.stem for p in figures if p.suffix == ".svg"} == stems
    for path in figures:
        if path.suffix == ".png":
            _non_blank(path)
        else:
            assert path.read_text().lstrip().startswith("<?xml") and "<svg" in path.read_text()[:2000]


def test_plot_rejects_what_it_cannot_draw(pipeline, tmp_path):
    state, root = pipeline
    result = CliRunner().invoke(
        app, ["--artifacts-root", str(root), "report", "plot", _artifact(state, "base")]
    )
    assert result.exit_code == 3 and "no figures for stage 'toy-init'" in result.output
    missing = CliRunner().invoke(app, ["--artifacts-root", str(root), "report", "plot", "rl-000000000000"])
    assert missing.exit_code == 3


def test_report_pipeline_markdown(pipeline):
    state, root = pipeline
    result = CliRunner().invoke(app, ["--artifacts-root", str(root), "-q", "report", "pipeline", str(state)])
    assert result.exit_code == 0, result.output
    assert (
        "| rl_aepo | rl-" in result.stdout and "| total |" in result.stdout and "rho(len,d)" in result.stdout
    )


def test_report_page_is_self_contained_and_loads_in_a_browser(pipeline, tmp_path):
    state, root = pipeline
    page = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["--artifacts-root", str(root), "--json", "report", "html", str(state),
                                      "--out", str(page)])  # fmt: skip
    assert result.exit_code == 0, result.output
    text = page.read_text()
    n_png = sum(p.endswith(".png") for p in json.loads(result.stdout)["figures"])
    assert text.count('<img src="data:image/png;base64,') == n_png >= 9
    assert "http://" not in text and "https://" not in text and "<script" not in text
    for stage in SPEC["stages"]:
        assert f"<td>{stage}</td>" in text
    assert _artifact(state, "rl_aepo").split("/")[-1] in text and "Lineage of each model" in text

    from headless_browser import find_browser, load_page

    browser = find_browser()
    if browser is None:
        pytest.skip("no headless browser (install the Debian package 'chromium'; .ci/run does)")
    seen = load_page(page, browser)
    (tmp_path / "screenshot.png").write_bytes(seen["screenshot"])
    assert len(seen["images"]) == n_png
    assert all(img["complete"] and img["width"] > 0 for img in seen["images"]), seen["images"]
    assert seen["console"] == [] and seen["exceptions"] == [] and seen["log_errors"] == []
    assert seen["failed_requests"] == []
    _non_blank(tmp_path / "screenshot.png")
