"""Every name is declared once, in a registry entry, and checked when the config resolves: an unknown name or
key fails with exit 2 before any data is read or model loaded, naming what is registered; a constant the chosen
loss, estimator or algorithm does not read is refused; --help, the docs and the micro-batch planner read the
registries."""

from __future__ import annotations

import ast
import dataclasses
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ares_cli.algorithms.advantages import ADVANTAGES
from ares_cli.algorithms.kl import KL_ESTIMATORS
from ares_cli.algorithms.loss_aggregation import AGGREGATIONS
from ares_cli.algorithms.policy_loss_core import POLICY_LOSSES, PolicyLossConfig, loss_constants
from ares_cli.algorithms.registry import Entry, Registry
from ares_cli.config import describe
from ares_cli.errors import UsageError
from ares_cli.main import app
from ares_cli.training.rl.config import RLConfig, resolve_rl_config
from ares_cli.training.rl.registry import ALGORITHMS, PRESETS, check_reads

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ares_cli"
TOY = ROOT / "ares_cli" / "toy" / "base"
# every config key that names a registered entry, with what it may name
NAMED = {
    "algo": ALGORITHMS,
    "loss.policy_loss": POLICY_LOSSES,
    "loss.advantage": ADVANTAGES,
    "loss.aggregation": AGGREGATIONS,
    "kl.estimator": KL_ESTIMATORS,
}


def _names(choices) -> list[str]:
    return choices.names() if hasattr(choices, "names") else list(choices)


# ---- the registry itself --------------------------------------------------------------------------------
def test_registry_loads_its_providers_lazily_and_refuses_duplicates(tmp_path, monkeypatch):
    (tmp_path / "provider_mod.py").write_text(
        "from test_registry import WIDGETS\n@WIDGETS.register('b', summary='bee')\ndef b():\n    return 2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    widgets = Registry("widget", providers=("provider_mod",))
    monkeypatch.setattr(__import__("test_registry"), "WIDGETS", widgets, raising=False)
    widgets.register("a", lambda: 1)
    assert "b" in widgets and widgets.names() == ["a", "b"] and widgets.get("b")() == 2
    assert widgets.entry("b").summary == "bee" and isinstance(widgets.entry("a"), Entry)
    with pytest.raises(ValueError, match="duplicate"):
        widgets.register("a", lambda: 3)
    with pytest.raises(UsageError, match=r"unknown widget 'bb'; valid: a, b \(did you mean 'b'\?\)"):
        widgets.get("bb")
    widgets.unregister("a")
    assert widgets.names() == ["b"]
    lazy = Registry("thing")
    lazy.register("json_dumps", "json:dumps")
    assert lazy.get("json_dumps")([1]) == "[1]"


def test_every_module_that_registers_a_loss_is_a_provider():
    """A loss in a module the registry does not list would never register (nothing imports it)."""
    registering = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "POLICY_LOSSES"):  # fmt: skip
                registering.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    assert registering and registering == set(POLICY_LOSSES.providers)


def test_every_loss_constant_is_read_by_some_loss():
    shared = set(loss_constants(every_loss=True))
    read = {name for entry in POLICY_LOSSES.entries() for name in entry.reads}
    assert set(loss_constants()) == shared | read
    assert {"log_ratio_clamp", "entropy_coef", "top_entropy_frac"} <= shared
    with pytest.raises(ValueError, match="not loss-specific constants"):
        POLICY_LOSSES.register("typo_loss", lambda *a, **k: None, reads=("clip_hihg",))
    assert "typo_loss" not in POLICY_LOSSES


def test_the_loss_section_is_the_library_config():
    """The 15 constants are declared once: LossConfig is PolicyLossConfig with the names added, and the
    algorithm hands the section itself to the loss (no copy)."""
    from ares_cli.training.rl.config import LossConfig
    from ares_cli.training.rl.registry import build_algorithm

    lib = {f.name for f in dataclasses.fields(PolicyLossConfig)}
    own = set(LossConfig.__dataclass_fields__) - lib
    assert own == {"policy_loss", "advantage", "adv_std", "adv_eps", "aggregation", "chunk_size"}
    for f in dataclasses.fields(LossConfig):
        if f.name in lib:
            assert f is not None and LossConfig.__dataclass_fields__[f.name].default == getattr(
                PolicyLossConfig(), f.name
            )
    cfg = resolve_rl_config(sets=["algo=cispo"])
    assert build_algorithm(cfg, lambda t: t).policy_loss_config() is cfg.loss


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_algorithm_builds_and_its_preset_reads_its_own_keys(name):
    from ares_cli.training.rl.registry import build_algorithm

    entry = ALGORITHMS.entry(name)
    cfg = resolve_rl_config(sets=[f"algo={name}"])
    assert build_algorithm(cfg, lambda t: t) is not None
    assert all(hasattr(cfg, section) for section in entry.sections)
    check_reads(cfg, [dict(entry.preset)])  # the preset as if the user had written it: nothing unread


def test_presets_are_read_from_the_registry():
    assert set(PRESETS) == set(ALGORITHMS.names()) and PRESETS["dapo"]["loss"]["clip_high"] == 0.28


# ---- early, named failures ------------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(NAMED))
def test_an_unknown_name_lists_every_registered_one(key):
    choices = _names(NAMED[key])
    with pytest.raises(UsageError) as err:
        resolve_rl_config(sets=[f"{key}={choices[0]}x"])
    message = str(err.value)
    assert all(name in message for name in choices), message
    assert f"did you mean {choices[0]!r}" in message


def test_every_registered_name_resolves():
    for key, choices in NAMED.items():
        for name in _names(choices):
            sets = [f"{key}={name}"]
            if key == "loss.aggregation" and name == "seq_sum_constant":
                sets.append("rollout.max_new_tokens=64")
            resolve_rl_config(sets=sets)


@pytest.mark.parametrize("key", [k for k, _, _ in describe(RLConfig)])
def test_every_misspelled_key_is_refused(key):
    *section, leaf = key.split(".")
    with pytest.raises(UsageError, match="unknown config key"):
        resolve_rl_config(sets=[".".join([*section, leaf + "x"]) + "=1"])


def _cli_fails_before_any_work(monkeypatch, *sets: str) -> str:
    """``ares rl`` on the toy model and data with ``sets``: exit 2, and neither the model nor the data was
    touched (both raise if the stage gets that far)."""

    def touched(*_a, **_k):
        raise AssertionError("the stage read its inputs before checking the config")

    monkeypatch.setattr("ares_cli.stages.inputs.resolve_model", touched)
    monkeypatch.setattr("ares_cli.data.loader.load_problems", touched)
    args = ["rl", "--model", str(TOY), "--data", "toy-train"] + [a for s in sets for a in ("--set", s)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    return result.output


@pytest.mark.parametrize("key", sorted(NAMED))
def test_ares_rl_refuses_a_typo_before_loading_anything(key, monkeypatch):
    choices = _names(NAMED[key])
    out = _cli_fails_before_any_work(monkeypatch, f"{key}={choices[-1]}_x")
    assert all(name in out for name in choices), out


def test_ares_rl_refuses_a_typo_in_the_issue_command(monkeypatch):
    out = _cli_fails_before_any_work(monkeypatch, "loss.policy_loss=ppo_clipx")
    assert "unknown policy loss 'ppo_clipx'; valid: cispo, clip_cov, gspo, gspo_token, kl_cov, ppo" in out
    assert "unknown config key 'loss.polcy_loss'" in _cli_fails_before_any_work(
        monkeypatch, "loss.polcy_loss=ppo"
    )
    assert "does not read it" in _cli_fails_before_any_work(monkeypatch, "algo=cispo", "loss.clip_high=0.28")


def test_rl_help_lists_every_algorithm():
    text = CliRunner().invoke(app, ["rl", "--help"], terminal_width=200).output
    assert all(name in text for name in ALGORITHMS.names())


def test_docs_list_every_registered_name():
    from ares_cli.report.config_docs import render

    text = render()
    for choices in NAMED.values():
        quoted = "`{}`" if hasattr(choices, "names") else "{}"  # a registry's own table, or a key's help
        assert all(quoted.format(name) in text for name in _names(choices))
    for entry in POLICY_LOSSES.entries():
        assert entry.summary and entry.summary.replace("|", "\\|") in text


# ---- what each entry reads ------------------------------------------------------------------------------
def test_a_constant_the_chosen_loss_does_not_read_is_refused():
    with pytest.raises(
        UsageError, match=r"'loss.clip_high' is set, but policy loss 'cispo' does not read it"
    ):
        resolve_rl_config(sets=["algo=cispo", "loss.clip_high=0.28"])
    with pytest.raises(UsageError, match="'loss.cispo_eps_high' is set, but policy loss 'ppo'"):
        resolve_rl_config(sets=["loss.cispo_eps_high=3"])
    with pytest.raises(UsageError, match="'loss.dual_clip' is set, but policy loss 'kl_cov'"):
        resolve_rl_config(sets=["algo=kl_cov", "loss.dual_clip=null"])
    with pytest.raises(
        UsageError, match="'loss.adv_std' is set, but advantage estimator 'reinforce_pp_baseline'"
    ):
        resolve_rl_config(sets=["loss.advantage=reinforce_pp_baseline", "loss.adv_std=biased"])
    with pytest.raises(UsageError, match="algorithm 'grpo' does not read the paec section"):
        resolve_rl_config(sets=["paec.beta=0.5"])
    # what they do read, and the shared modifiers, pass
    assert resolve_rl_config(sets=["algo=cispo", "loss.cispo_eps_high=3"]).loss.cispo_eps_high == 3
    assert resolve_rl_config(sets=["algo=kl_cov", "loss.log_ratio_clamp=null"]).loss.log_ratio_clamp is None
    assert (
        resolve_rl_config(sets=["aepo.easy_pass_frac=0.8"]).aepo.easy_pass_frac == 0.8
    )  # every run's buckets


def test_a_recipe_key_under_a_later_choice_is_a_warning(tmp_path):
    recipe = tmp_path / "rl.yaml"
    recipe.write_text("rl:\n  algo: aepo\n  aepo: {window: 6}\n  loss: {clip_high: 0.28}\n")
    with pytest.warns(UserWarning, match="aepo.window, loss.clip_high: ignored"):
        cfg = resolve_rl_config(yaml_path=recipe, sets=["algo=cispo"])
    assert cfg.algo == "cispo"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve_rl_config(yaml_path=recipe)  # consistent recipe: no warning
    with pytest.raises(UsageError, match="'loss.clip_high' is set"):  # the same layer chose cispo: an error
        resolve_rl_config(sets=["algo=cispo", "loss.clip_high=0.3"])


# ---- the micro-batch planner reads the entries ---------------------------------------------------------
def test_micro_batch_statistics_come_from_the_entries():
    from ares_cli.training.micro_batches import budget_setting, per_micro_batch_statistics

    flagged = {e.name for e in POLICY_LOSSES.entries() if e.micro_batch_statistics}
    assert flagged == {"clip_cov", "kl_cov"}
    for name in POLICY_LOSSES.names():
        cfg = resolve_rl_config(sets=[f"loss.policy_loss={name}"])
        assert per_micro_batch_statistics(cfg.loss) == (name in flagged)
        assert budget_setting(cfg) == (None if name in flagged else "auto")
    assert per_micro_batch_statistics(resolve_rl_config(sets=["algo=topent"]).loss)
    POLICY_LOSSES.register("batch_stat_probe", lambda *a, **k: None, micro_batch_statistics=True)
    try:
        assert per_micro_batch_statistics(resolve_rl_config(sets=["loss.policy_loss=batch_stat_probe"]).loss)
    finally:
        POLICY_LOSSES.unregister("batch_stat_probe")
