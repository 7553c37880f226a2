"""``ares_cli.config``: precedence, --set parsing (on/off/yes/no stay strings), unknown keys, nested sections."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from ares_cli.config import describe, option, parse_sets, resolve
from ares_cli.errors import UsageError


@dataclass
class Inner:
    window: int = option(4, "Window.")
    mode: Literal["off", "filter"] = option("off", "Mode.")


@dataclass
class Outer:
    lr: float = option(1e-3, "Learning rate.")
    steps: int = option(10, "Steps.")
    shaping: bool = option(False, "A switch.")
    name: str | None = option(None, "A name.")
    inner: Inner = option(Inner(), "A section.")


@pytest.mark.parametrize("word", ["on", "off", "yes", "no", "ON", "Off", "YES", "No"])
def test_set_keeps_yaml11_bool_words_as_strings(word):
    assert parse_sets([f"inner.mode={word}", f"name={word}"]) == {"inner": {"mode": word}, "name": word}


def test_set_still_parses_other_yaml_scalars():
    assert parse_sets(["a=1", "b=0.5", "c=true", "d=null", "e=[1, 2]", "f=", "g=x"]) == {
        "a": 1, "b": 0.5, "c": True, "d": None, "e": [1, 2], "f": "", "g": "x"
    }  # fmt: skip


def test_set_off_on_a_literal_field_is_the_string():
    assert resolve(Outer, sets=["inner.mode=off"]).inner.mode == "off"
    assert resolve(Outer, sets=["inner.mode=filter"]).inner.mode == "filter"
    assert resolve(Outer, sets=["name=no"]).name == "no"


@pytest.mark.parametrize(
    ("word", "value"),
    [
        ("on", True),
        ("yes", True),
        ("On", True),
        ("true", True),
        ("off", False),
        ("NO", False),
        ("false", False),
    ],
)
def test_bool_fields_accept_on_off_yes_no(word, value):
    assert resolve(Outer, sets=[f"shaping={word}"]).shaping is value


def test_yaml_file_bare_off_on_a_literal_field(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("inner: {mode: off}\nshaping: on\n")  # YAML 1.1 reads both as bools
    cfg = resolve(Outer, yaml_path=path)
    assert (cfg.inner.mode, cfg.shaping) == ("off", True)


def test_precedence_defaults_yaml_set_flags(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lr: 0.1\nsteps: 20\ninner: {window: 6}\nshaping: true\n")
    assert resolve(Outer).lr == 1e-3
    cfg = resolve(Outer, yaml_path=path)
    assert (cfg.lr, cfg.steps, cfg.inner.window, cfg.shaping) == (0.1, 20, 6, True)
    cfg = resolve(Outer, yaml_path=path, sets=["lr=0.2", "inner.window=8"])
    assert (cfg.lr, cfg.steps, cfg.inner.window) == (0.2, 20, 8)
    cfg = resolve(Outer, yaml_path=path, sets=["lr=0.2"], flags={"lr": 0.3, "steps": None, "inner.window": 9})
    assert (cfg.lr, cfg.steps, cfg.inner.window) == (0.3, 20, 9)  # a None flag is unset


def test_yaml_section(tmp_path):
    path = tmp_path / "pipeline.yaml"
    path.write_text("sft: {steps: 3}\nrl: {steps: 4}\n")
    assert resolve(Outer, yaml_path=path, section="rl").steps == 4


def test_unknown_key_lists_valid_keys():
    with pytest.raises(UsageError, match=r"unknown config key 'bogus'; valid keys: inner, lr, name, shaping"):
        resolve(Outer, sets=["bogus=1"])
    with pytest.raises(UsageError, match=r"unknown config key 'inner.size'; valid keys: inner.mode, inner"):
        resolve(Outer, sets=["inner.size=1"])


def test_nested_section_needs_dotted_keys():
    assert resolve(Outer, sets=["inner.window=5"]).inner == Inner(window=5)
    with pytest.raises(UsageError, match=r"'inner' is a section; set its fields as inner.<field>"):
        resolve(Outer, sets=["inner=3"])


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("steps=many", "config key 'steps': expected an integer"),
        ("steps=true", "config key 'steps': expected an integer"),
        ("lr=fast", "config key 'lr': expected a number"),
        ("shaping=maybe", "config key 'shaping': expected true/false"),
        ("inner.mode=on", "config key 'inner.mode': 'on' is not one of off, filter"),
        ("inner.window=1.5", "config key 'inner.window': expected an integer"),
    ],
)
def test_type_errors_name_the_key(pair, message):
    with pytest.raises(UsageError, match=message):
        resolve(Outer, sets=[pair])


def test_set_without_equals_is_an_error():
    with pytest.raises(UsageError, match="--set expects key=value"):
        parse_sets(["lr"])


def test_describe_recurses_into_sections():
    rows = {key: (default, help_text) for key, default, help_text in describe(Outer)}
    assert rows["lr"] == (1e-3, "Learning rate.")
    assert rows["inner.mode"] == ("off", "Mode.")
    assert "inner" not in rows


@dataclass
class Bounded:
    k: int = option(8, "Samples.", ge=1, le=64)
    temperature: float = option(1.0, "Temperature.", ge=0.0)
    limit: int | None = option(None, "Limit.", ge=1)
    low: float = option(0.1, "Low.", ge=0.0, le=1.0)
    high: float = option(0.9, "High.", ge=0.0, le=1.0)

    def check(self) -> None:
        if not self.low < self.high:
            raise UsageError("low must be below high")


@dataclass
class Nested:
    inner: Bounded = option(Bounded(), "A bounded section.")


@pytest.mark.parametrize(
    ("sets", "fragment"),
    [
        (["k=0"], "config key 'k': 0 is out of range (must be >= 1, <= 64)"),
        (["k=65"], "must be >= 1, <= 64"),
        (["temperature=-0.5"], "config key 'temperature': -0.5 is out of range"),
        (["temperature=.inf"], "config key 'temperature': inf is not a finite number"),
        (["temperature=.nan"], "not a finite number"),
        (["limit=0"], "config key 'limit'"),
        (["low=0.9", "high=0.1"], "low must be below high"),
    ],
)
def test_ranges_and_cross_field_rules_are_checked_at_resolve(sets, fragment):
    with pytest.raises(UsageError, match=None) as err:
        resolve(Bounded, sets=sets)
    assert fragment in str(err.value)


def test_nested_sections_are_checked_with_their_dotted_key():
    with pytest.raises(UsageError, match=r"'inner\.k': 0 is out of range"):
        resolve(Nested, sets=["inner.k=0"])
    with pytest.raises(UsageError, match="low must be below high"):
        resolve(Nested, sets=["inner.low=1", "inner.high=0"])
    assert resolve(Nested, sets=["inner.k=64", "inner.limit=null"]).inner.k == 64


def test_flags_are_range_checked_like_sets():
    with pytest.raises(UsageError, match="'k'"):
        resolve(Bounded, flags={"k": -1})
    assert resolve(Bounded, flags={"k": 1, "temperature": 0.0}).k == 1


def test_describe_appends_the_valid_range():
    rows = {key: text for key, _, text in describe(Bounded)}
    assert rows["k"] == "Samples. Range: >= 1, <= 64."
    assert rows["temperature"] == "Temperature. Range: >= 0."
