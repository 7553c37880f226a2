"""The study scripts (studies/): every spec loads and names recipes that resolve, and the recipes summary's
statistics against hand-computed values."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SPECS = sorted((REPO / "studies").glob("*.yaml"))


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "studies" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


run_study = _script("run_study")
recipes = _script("summarize_recipes")


@pytest.mark.parametrize("path", SPECS, ids=[p.name for p in SPECS])
def test_every_study_spec_loads_and_its_recipes_resolve(path):
    from ares_cli.training.rl.config import resolve_rl_config

    spec = run_study.load_spec(path)
    assert spec["seeds"] and spec["arms"]
    for arm, entry in spec["arms"].items():
        recipe, sets = run_study.arm_recipe(entry)
        cfg = resolve_rl_config(yaml_path=REPO / recipe, sets=sets)
        assert cfg.steps > 0, arm
        if spec.get("val_data"):  # a spec that validates runs recipes that validate
            assert cfg.val.every > 0, arm


def test_a_spec_naming_a_missing_recipe_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: m\ndata: toy-train\nseeds: [0]\narms: {a: pipelines/rl/nope.yaml}\n")
    with pytest.raises(SystemExit, match="arm 'a': no recipe at pipelines/rl/nope.yaml"):
        run_study.load_spec(bad)


def test_an_arm_is_a_recipe_or_a_recipe_with_overrides(tmp_path):
    assert run_study.arm_recipe("pipelines/rl/toy-grpo.yaml") == ("pipelines/rl/toy-grpo.yaml", [])
    entry = {"config": "pipelines/rl/toy-paec.yaml", "set": ["paec.rho_min=0.95"]}
    assert run_study.arm_recipe(entry) == ("pipelines/rl/toy-paec.yaml", ["paec.rho_min=0.95"])
    with pytest.raises(SystemExit, match="an arm is a recipe path"):
        run_study.arm_recipe({"recipe": "pipelines/rl/toy-paec.yaml"})
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: m\ndata: toy-train\nseeds: [0]\n"
                   "arms: {a: {config: pipelines/rl/toy-paec.yaml, set: [rho_min]}}\n")  # fmt: skip
    with pytest.raises(SystemExit, match="arm 'a': set must be a list of KEY=VALUE"):
        run_study.load_spec(bad)


def test_validation_by_step_needs_the_step_zero_point():
    rows = [{"step": 0, "val/accuracy": 0.25}, {"step": 1, "accuracy": 0.5},
            {"step": 20, "val/accuracy": 0.5}, {"step": 40, "val/accuracy": 0.75}]  # fmt: skip
    assert recipes.val_by_step(rows, "m.jsonl") == {0: 0.25, 20: 0.5, 40: 0.75}
    with pytest.raises(SystemExit, match=r"m.jsonl: needs validation at step 0 .*\[20, 40\]"):
        recipes.val_by_step(rows[2:], "m.jsonl")


def test_pooled_difference_averages_each_problem_over_seeds_first():
    # seed 0: arm - base = (+0.5, 0, -0.25); seed 1: (+0.25, +0.25, -0.25); problem "d" only in seed 0
    seed0 = ({"a": 1.0, "b": 0.5, "c": 0.25, "d": 1.0}, {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.0})
    seed1 = ({"a": 0.75, "b": 0.5, "c": 0.0}, {"a": 0.5, "b": 0.25, "c": 0.25})
    out = recipes.pooled_difference({0: seed0, 1: seed1})
    diffs = [0.375, 0.125, -0.25]  # per problem, mean over the two seeds
    mean = sum(diffs) / 3
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2 / 3)
    assert out == pytest.approx({"delta": mean, "se": se, "n": 3})
