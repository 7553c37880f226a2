"""``ares plan`` suggests optimizer offload where it makes a run fit: the PAEC recipe with the Qwen2.5-Math-1.5B
shape twin (28 layers, headers only: ``tests/plan_models.py``) on one 24 GiB GPU gets
``--deepspeed pipelines/deepspeed/zero2_offload.json`` with the estimate that file really gives (and with
it the run fits and gets no suggestion); a GPU too small even with offload gets none that claims to fit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ares_cli.main import app

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
OFFLOAD2 = "--deepspeed pipelines/deepspeed/zero2_offload.json"


@pytest.fixture(scope="module")
def qwen15(tmp_path_factory) -> Path:
    from plan_models import header_only_twin

    return header_only_twin(tmp_path_factory.mktemp("q15") / "model")


def _plan(tmp_path, model, *extra) -> tuple[int, dict]:
    args = [
        "--artifacts-root",
        str(tmp_path),
        "--json",
        "plan",
        "rl",
        "--model",
        str(model),
        "--data",
        "toy-train",
        "--config",
        "pipelines/rl/paec-qwen2.5-math-1.5b.yaml",
        "--set",
        "data_limit=200",
        "--set",
        "grading.workers=1",
        *extra,
    ]  # fmt: skip  (one gold-check worker: the estimate ignores it)
    result = CliRunner().invoke(app, args)
    return result.exit_code, json.loads(result.stdout)


def test_paec_on_one_24gib_gpu_is_offered_offload_with_the_figure_it_reaches(qwen15, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the recipe and the suggestion name files relative to the repository
    code, report = _plan(tmp_path, qwen15, "--gpus", "1", "--gpu-memory", "24GiB")
    assert code == 5  # ZeRO-2 on one GPU: 20P = 28.8 GiB of model states alone
    offload = {s["change"]: s for s in report["suggestions"]}[OFFLOAD2]
    assert offload["fits"] and offload["need_gib"] <= offload["budget_gib"]
    assert "host memory" in offload["notes"][0] and "not checked" in offload["notes"][0]
    # the figure is the plan of the run with that file: the same need; it fits, so it suggests nothing
    code, applied = _plan(tmp_path, qwen15, "--gpus", "1", "--gpu-memory", "24GiB", *OFFLOAD2.split())
    assert code == 0, applied["verdict"]
    assert applied["estimate"]["need_gib"] == offload["need_gib"] and applied["suggestions"] == []
    terms = {t["name"] for t in applied["estimate"]["terms"]}
    assert "weights + gradients + AdamW (ZeRO-2, optimizer offloaded)" in terms


def test_a_gpu_too_small_even_with_offload_gets_no_false_promise(qwen15, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    code, report = _plan(tmp_path, qwen15, "--gpus", "1", "--gpu-memory", "8GiB")
    assert code == 5 and report["suggestions"]
    for s in report["suggestions"]:  # the one combination the plan has: still not fitting, and says so
        assert not s["fits"] and s["reasons"] and s["change"].count("--deepspeed") <= 1, s


def test_an_offloaded_optimizer_is_not_offered_again():
    from ares_cli.planning.suggest import OFFLOAD_FILES, ZERO_FILES, offload_changes, zero_family
    from ares_cli.planning.target import Target

    assert offload_changes(OFFLOAD_FILES[2], Target(), 10**9) == []
    family = offload_changes(ZERO_FILES[3], Target(), 10**9, key="optim.deepspeed")
    # never a lower stage than the one in use
    assert [c.flag for c in family] == ["--deepspeed pipelines/deepspeed/zero3_offload.json"]
    assert family[0].sets == (("optim.deepspeed", "pipelines/deepspeed/zero3_offload.json"),)
    two = offload_changes(None, Target(gpus_per_node=8), 10**9)[0]  # DeepSpeed: P x max(4 x 8, 16) x 1.5
    assert f"~{10**9 * 32 * 1.5 / 2**30:.1f} GiB of host memory" in two.note
    # one family with the stages, mildest first, so a combination never names two files
    flags = [c.flag.split("/")[-1] for c in zero_family(ZERO_FILES[2], Target(), 10**9)]
    assert flags == ["zero3.json", "zero2_offload.json", "zero3_offload.json"]


@pytest.mark.parametrize("stage", [2, 3])
def test_the_suggested_files_hold_the_settings_the_plan_assumes(stage):
    pytest.importorskip("deepspeed")
    from ares_cli.planning.suggest import OFFLOAD_FILES, ZERO_FILES
    from ares_cli.training.distributed import check_deepspeed_config, deepspeed_config
    from ares_cli.training.offload import with_client_optimizer

    for path, settings in ((f"zero{stage}.json", ZERO_FILES), (f"zero{stage}_offload.json", OFFLOAD_FILES)):
        file = REPO / "pipelines" / "deepspeed" / path
        filled = deepspeed_config(file, micro_batch=1, grad_accum=1, world_size=1, grad_clip=1.0, bf16=True)
        assert check_deepspeed_config(with_client_optimizer(filled, file), file) == settings[stage], path
