"""Every RL recipe in pipelines/rl resolves, the toy ablations change only their component, and each toy
recipe runs one RL step end to end on the tiny random model with its algorithm's metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

RL = Path(__file__).resolve().parents[1] / "pipelines" / "rl"
RECIPES = sorted(RL.glob("*.yaml"))
TOY = sorted(p.stem for p in RECIPES if p.stem.startswith("toy-"))
# one tiny step: the recipe's own algorithm settings, rollout and batch shrunk (as tests/test_rl.py does)
TINY = ["steps=1", "save_every=0", "val.every=0", "rollout.prompts_per_step=2", "rollout.group_size=4",
        "rollout.max_new_tokens=10", "optim.mini_batch_size=1", "optim.micro_batch_size=3", "grading.workers=1",
        "grading.grader=test_rl_graders:parity_grade", "grading.trust_grader_code=true",
        "reward.overlong_buffer=4"]  # fmt: skip

# ablation recipe -> (full recipe, the only config keys it changes)
ABLATIONS = {
    "toy-aepo-shaping-only": ("toy-aepo", {"aepo.dynamic_kl"}),
    "toy-aepo-kl-only": ("toy-aepo", {"aepo.reward_shaping"}),
    "toy-aepo-neither": ("toy-aepo", {"aepo.dynamic_kl", "aepo.reward_shaping"}),
    "toy-paec-no-penalty": ("toy-paec", {"paec.lambda_ent"}),
    "toy-paec-no-mask": ("toy-paec", {"paec.soft_mask"}),
    "toy-paec-beta0": ("toy-paec", {"paec.beta"}),
    "toy-paec-beta0.7": ("toy-paec", {"paec.beta"}),
    "toy-paec-quantile0.3": ("toy-paec", {"paec.quantile"}),
    "toy-grpo-branching": ("toy-grpo", {"rollout.branching.enabled", "rollout.branching.token_budget"}),
}


def _resolve(name: str, *sets: str):
    from ares_cli.training.rl.config import resolve_rl_config

    return resolve_rl_config(yaml_path=RL / f"{name}.yaml", sets=list(sets))


def _flat(cfg) -> dict:
    from ares_cli.config import to_dict

    def walk(d, prefix=""):
        for k, v in d.items():
            yield from walk(v, f"{prefix}{k}.") if isinstance(v, dict) else [(f"{prefix}{k}", v)]

    return dict(walk(to_dict(cfg)))


def _diff(a: str, b: str) -> set[str]:
    fa, fb = _flat(_resolve(a)), _flat(_resolve(b))
    return {k for k in fa if fa[k] != fb[k]}


# ---- resolution and consistency -----------------------------------------------------------------------
@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_resolves(path):
    from ares_cli.config import load_yaml

    cfg = _resolve(path.stem)  # unknown keys raise UsageError
    assert cfg.algo == load_yaml(path, section="rl")["algo"]
    assert path.read_text().startswith("# ")  # a header comment names what it reproduces


def test_every_toy_recipe_is_covered():
    assert set(ABLATIONS) | {"toy-aepo", "toy-paec", "toy-aer", "toy-grpo", "toy-dapo", "toy-gspo"} == set(
        TOY
    )
    for name in [*ABLATIONS, "toy-aepo", "toy-paec", "toy-aer", "toy-gspo"]:
        assert f"--config pipelines/rl/{name}.yaml" in (RL / f"{name}.yaml").read_text()


def test_full_methods_share_toy_grpo_settings():
    # the AEPO preset's KL (coef 1 x kappa_d token weights) and online filtering; nothing else
    assert _diff("toy-aepo", "toy-grpo") == {"algo", "kl.coef", "filter.mode"}
    assert _diff("toy-paec", "toy-grpo") == {"algo"}
    assert _diff("toy-aer", "toy-grpo") == {"algo"}  # PAEC's AER constants are AERConfig's defaults
    # the GSPO preset (policy loss, sec. 5.1's clip ranges, no dual clip, no KL) and four mini-batches per step
    assert _diff("toy-gspo", "toy-grpo") == {"algo", "loss.policy_loss", "loss.clip_low", "loss.clip_high",
                                             "loss.dual_clip", "kl.coef", "optim.mini_batch_size"}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ABLATIONS))
def test_ablation_changes_only_its_component(name):
    full, keys = ABLATIONS[name]
    assert _diff(name, full) == keys


# ---- one RL step per toy recipe -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def step(tiny_model_dir, tmp_path_factory):
    """name (+ extra sets) -> (metrics row of the one step, final model dir); cached per module."""
    from ares_cli.data.loader import load_problems
    from ares_cli.training.rl.trainer import train_rl

    problems, cache = load_problems("toy-train", limit=12).records, {}

    def run(name: str, *sets: str):
        key = (name, sets)
        if key not in cache:
            out = tmp_path_factory.mktemp(name)
            result = train_rl(_resolve(name, *TINY, *sets), model_path=tiny_model_dir, problems=problems,
                              val_problems=None, out_dir=out, log=lambda _m: None)  # fmt: skip
            assert result.complete and result.stats["steps"] == 1
            (row,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
            cache[key] = (row, out / "model")
        return cache[key]

    return run


AEPO_SHAPING = ("aepo/easy/lambda", "aepo/hard/lambda", "aepo/medium/target")
AEPO_KL = ("aepo/easy/kappa", "aepo/hard/kappa")


@pytest.mark.parametrize("name", TOY)
def test_toy_recipe_runs_one_step(name, step):
    row, _ = step(name)
    assert row["step"] == 1 and row["response_len"] > 0 and "loss" in row
    if "aepo" in name:
        assert {"aepo/threshold", "aepo/threshold_batch", "aepo/easy/n_he"} <= set(row)
        shaping = name in ("toy-aepo", "toy-aepo-shaping-only")
        dynamic = name in ("toy-aepo", "toy-aepo-kl-only")
        assert all((k in row) == shaping for k in AEPO_SHAPING), name
        assert all((k in row) == dynamic for k in AEPO_KL), name
        assert "aepo/medium/kl_nonwindow" in row  # measured with or without the controller
        if not shaping:
            assert row["aepo/shaping_abs_mean"] == 0.0 and row["reward"] == pytest.approx(row["reward_base"])
        if not dynamic:
            assert row["kl_weight_mean"] == pytest.approx(0.01)  # uniform kl_init on every token
    if "branching" in name:
        assert "branch/points" in row and "branch/tokens" in row
    assert "rollout/hard_correct_per_ktoken" in row  # every run: branching compares with plain sampling
    if "gspo" in name:
        assert row["gspo_seq_ratio_mean"] > 0 and "kl_k3" not in row  # no reference model, no KL term
    if "aer" in name:
        assert row["aer/h0"] > 0 and row["aer/target"] == pytest.approx(0.4 * row["aer/h0"])
        assert row["aer/alpha"] == 0.0 and 0.0 <= row["aer/hard_frac"] <= 1.0  # alpha_0 = 0 on step 1
    if "paec" in name:
        assert row["paec/h_bar"] > 0 and row["paec/h0"] > 0 and "paec/penalty" in row
        mask_mean = row["paec/mask_mean"]
        if name == "toy-paec-no-mask":
            assert mask_mean == 1.0  # m = 1 on every response token
        else:
            assert 0.0 < mask_mean < 1.0
        if name == "toy-paec-no-penalty":
            assert row["paec/loss"] == pytest.approx(-8e-4 * row["paec/h_bar"])


def test_paec_sensitivity_recipes_move_the_score_and_mask(step):
    """Same seed, same first rollouts: beta raises the score (s2 >= 0), a lower quantile widens the mask."""
    score = {n: step(n)[0]["paec/score_mean"] for n in ("toy-paec-beta0", "toy-paec", "toy-paec-beta0.7")}
    assert score["toy-paec-beta0"] < score["toy-paec"] < score["toy-paec-beta0.7"]
    assert step("toy-paec-quantile0.3")[0]["paec/mask_mean"] > step("toy-paec")[0]["paec/mask_mean"]


def test_aepo_neither_is_grpo_with_aepo_base_kl(step):
    """With both components off, AEPO trains exactly like GRPO with kl.coef = kl_init and AEPO's filter."""
    from safetensors.torch import load_file

    row_a, model_a = step("toy-aepo-neither")
    row_g, model_g = step("toy-aepo-neither", "algo=grpo", "kl.coef=0.01")
    for key in ("reward", "loss", "pg_loss", "kl_loss", "grad_norm"):
        if key in row_g:
            assert row_a[key] == pytest.approx(row_g[key], rel=1e-5, abs=1e-9), key
    wa, wg = load_file(str(model_a / "model.safetensors")), load_file(str(model_g / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wa[k], wg[k], atol=1e-6, rtol=0)
