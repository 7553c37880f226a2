"""Generation budgets that fit the model: the user's, else generation_config.json, else the paper default."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import run_ares

from ares_cli.errors import UsageError
from ares_cli.models.budget import (
    Budget,
    check_fits,
    model_context,
    model_max_new_tokens,
    resolve_budget,
    resolve_seq_len,
)
from ares_cli.toy.build import base_dir
from ares_cli.toy.model import TOY_MAX_NEW_TOKENS
from ares_cli.toy.vision_build import vl_base_dir


def _model_with(tmp_path, generation_config: dict | None):
    """A copy of the shipped toy base whose generation_config.json is ``generation_config`` (None: absent)."""
    out = tmp_path / "model"
    shutil.copytree(base_dir(), out)
    path = out / "generation_config.json"
    if generation_config is None:
        path.unlink()
    else:
        path.write_text(json.dumps(generation_config))
    return out


def test_the_shipped_toy_models_carry_a_budget_that_fits_their_context():
    for model in (base_dir(), vl_base_dir()):
        assert model_max_new_tokens(model) == TOY_MAX_NEW_TOKENS
        assert model_context(model) == 640
        check_fits(resolve_budget(None, model, 1024), model_context(model))


def test_precedence_user_then_model_then_paper_default(tmp_path):
    assert resolve_budget(700, base_dir(), 1024) == Budget(700, "config")
    assert resolve_budget(None, base_dir(), 1024) == Budget(400, "model")
    assert resolve_budget(None, _model_with(tmp_path, {"eos_token_id": 2}), 1024) == Budget(1024, "default")
    assert resolve_budget(None, None, 8192) == Budget(8192, "default")


@pytest.mark.parametrize("value", [0, -5, True, "400", 3.5, None])
def test_a_generation_config_budget_that_is_not_a_positive_integer_is_ignored(tmp_path, value):
    assert model_max_new_tokens(_model_with(tmp_path, {"max_new_tokens": value})) is None


def test_a_budget_past_the_context_is_a_usage_error_naming_its_source():
    with pytest.raises(UsageError, match=r"640-token context \(from the model's generation_config.json;"):
        check_fits(Budget(640, "model"), 640)
    check_fits(Budget(639, "config"), 640)


def test_sft_sequence_length_is_capped_at_the_context_and_an_explicit_longer_one_refused():
    assert resolve_seq_len(None, 640) == (640, "model")
    assert resolve_seq_len(None, 131072) == (32768, "default")
    assert resolve_seq_len(None, None) == (32768, "default")
    assert resolve_seq_len(96, 640) == (96, "config")
    with pytest.raises(UsageError, match="exceeds the model's 640-token context"):
        resolve_seq_len(641, 640)


def test_rl_budget_comes_from_the_model_and_an_explicit_one_past_the_context_is_refused():
    from ares_cli.training.rl.config import resolve_rl_config, resolve_rollout_budget

    cfg = resolve_rl_config()
    assert resolve_rollout_budget(cfg, base_dir(), 640) == Budget(400, "model")
    assert cfg.rollout.max_new_tokens == 400
    with pytest.raises(UsageError, match="rollout.max_new_tokens"):
        resolve_rollout_budget(resolve_rl_config(sets=["rollout.max_new_tokens=1000"]), base_dir(), 640)
    with pytest.raises(UsageError, match="val.max_new_tokens"):
        resolve_rollout_budget(resolve_rl_config(sets=["val.max_new_tokens=4096"]), base_dir(), 640)


@pytest.mark.slow
def test_passrate_on_the_toy_runs_with_no_budget_flag_and_records_the_source(tmp_path):
    root = tmp_path / "artifacts"
    base = json.loads(run_ares("--json", "toy", "init", process=False, root=root).stdout)["path"]
    args = ("--json", "passrate", "--model", base, "--data", "toy-train", "-k", "2", "--limit", "4")
    out = json.loads(run_ares(*args, "--set", "grade_workers=1", process=False, root=root).stdout)
    manifest = json.loads((root / "passrate" / out["artifact_id"] / "manifest.json").read_text())
    assert manifest["stats"]["generation_budget"] == {"max_new_tokens": 400, "source": "model"}
    assert manifest["config"]["max_new_tokens"] == 400
    # the same number given explicitly is the same run
    again = json.loads(
        run_ares(
            *args, "--set", "grade_workers=1", "--max-new-tokens", "400", process=False, root=root
        ).stdout
    )
    assert again["up_to_date"] and again["artifact_id"] == out["artifact_id"]
    # an explicit budget that leaves no room for a prompt is still exit 2, with nothing left behind
    refused = run_ares(*args, "--max-new-tokens", "640", process=False, root=root, check=False)
    assert refused.returncode == 2 and "set explicitly" in refused.stderr
    assert not list((root / "passrate").glob("*.partial"))


@pytest.mark.slow
def test_eval_on_the_visual_toy_runs_with_no_budget_flag(tmp_path):
    root = tmp_path / "artifacts"
    base = json.loads(run_ares("--json", "toy", "init", "--vision", process=False, root=root).stdout)["path"]
    out = run_ares("--json", "eval", "--model", base, "--data", "toy-vl-test", "-k", "4", "--limit", "2",
                   "--set", "grade_workers=1", process=False, root=root)  # fmt: skip
    artifact = json.loads(out.stdout)["artifact_id"]
    stats = json.loads((root / "eval" / artifact / "manifest.json").read_text())["stats"]
    assert stats["generation_budget"] == {"max_new_tokens": 400, "source": "model"}


def test_a_model_without_a_budget_falls_back_to_the_paper_default_and_says_so(tmp_path):
    model = _model_with(tmp_path, {"bos_token_id": 1, "eos_token_id": 2})
    refused = run_ares("passrate", "--model", str(model), "--data", "toy-train", "--limit", "1",
                       process=False, root=tmp_path / "artifacts", check=False)  # fmt: skip
    assert refused.returncode == 2
    assert "max_new_tokens 1024 leaves no room" in refused.stderr
    assert "the stage's paper default" in refused.stderr
