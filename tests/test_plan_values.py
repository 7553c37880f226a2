"""The shared parser of planned quantities (ares_cli/store/values.py): each value typed and ranged, each
refusal an AresError of the right kind naming where the value came from, never an OverflowError."""

from __future__ import annotations

import pytest

from ares_cli.errors import InputError, UsageError
from ares_cli.store.values import At, boolean, byte_size, count, looks_numeric, mapping, number, number_text

OPTION = At.opt("--gpu-memory")
FIELD = At.in_file("zero.json", what="--deepspeed").child("zero_optimization").child("stage")


@pytest.mark.parametrize(("text", "expected"), [("80GiB", 80 * 2**30), ("24 gb", 24 * 10**9), ("1.5e10", 15 * 10**9),
                                                ("1KiB", 1024), ("1", 1), ("+2k", 2000)])  # fmt: skip
def test_a_size_is_bytes(text, expected):
    assert byte_size(text, OPTION) == expected


@pytest.mark.parametrize("text", ["1e400", "1e309GiB", "1e300TiB", "2PiB", "nan", "inf", "-1", "0", "0.5", "", "1e-4k",
                                  "80 XB", "0x10"])  # fmt: skip
def test_an_impossible_size_is_a_usage_error_naming_the_option(text):
    with pytest.raises(UsageError, match="^--gpu-memory: "):
        byte_size(text, OPTION)


def test_a_files_value_is_an_input_error_naming_file_field_and_option():
    with pytest.raises(InputError) as refused:
        count("2", FIELD, minimum=0, maximum=3)
    assert str(refused.value) == (
        "zero.json, field 'zero_optimization.stage': --deepspeed: must be an integer, got a string ('2')"
    )
    row = At.in_file("metrics.jsonl", row=4).child("tokens_per_s")
    with pytest.raises(InputError, match=r"metrics.jsonl, row 4, field 'tokens_per_s': must be >= 0"):
        number(-1, row, inclusive=True)


@pytest.mark.parametrize(
    "value", [True, False, None, "3", [3], 2.5, float("nan"), float("inf"), 0, -1, 2**53 + 1]
)
def test_count_refuses_what_is_no_positive_integer(value):
    with pytest.raises(InputError):
        count(value, FIELD)


def test_count_takes_integral_floats_only_when_asked():
    assert count(5e8, FIELD, integral_floats=True) == 500_000_000
    with pytest.raises(InputError):
        count(5e8, FIELD)
    with pytest.raises(InputError):
        count(2.5, FIELD, integral_floats=True)


@pytest.mark.parametrize("value", [10**400, -(10**400), float("inf"), float("nan"), True, "1", None, 0, -3])
def test_number_refuses_what_is_no_finite_positive_number(value):
    with pytest.raises(InputError):
        number(value, FIELD)


def test_number_and_number_text_keep_a_finite_value_in_range():
    assert number(0, FIELD, inclusive=True) == 0.0
    assert number(7, FIELD, maximum=7) == 7.0
    assert number_text(" 1.5e3 ", At.opt("--throughput")) == 1500.0
    with pytest.raises(UsageError, match="at most"):
        number_text("8", At.opt("--throughput"), maximum=7)
    with pytest.raises(UsageError, match="finite"):
        number_text("1e400", At.opt("--throughput"))


def test_booleans_mappings_and_number_like_text():
    assert boolean(False, FIELD) is False
    for value in (0, "false", None):
        with pytest.raises(InputError, match="true or false"):
            boolean(value, FIELD)
    assert mapping({}, FIELD) == {}
    with pytest.raises(InputError, match="an object"):
        mapping([], FIELD)
    assert all(looks_numeric(t) for t in ("2000", "-5", "inf", "NaN", "1e400", ".5"))
    assert not any(looks_numeric(t) for t in ("rl-abc", "0x10", "1_000", ""))
