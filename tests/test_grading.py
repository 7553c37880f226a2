"""Grading: extraction, registry, built-in graders and the killable worker pool (real math-verify)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from ares_cli.errors import UsageError
from ares_cli.grading import (
    GradeCache,
    GraderRegistry,
    GradingPool,
    default_registry,
    extract_boxed,
    resolve_grader,
)
from ares_cli.grading.graders import boxed_int_grade, math_verify_version, normalize_grade
from ares_cli.grading.math_grader import RULES_VERSION
from ares_cli.scoring.metrics import majority_correct

# -- custom graders, imported by name in the worker processes ------------------------------------------


def scripted_grader(gold: str, response: str) -> object:
    """Behaves as the response says: hang (soft-interruptible), hang ignoring signals, die, or compare."""
    if "HANG" in response:
        while True:
            time.sleep(0.05)
    if "STUCK" in response:  # the soft alarm cannot reach it: only the hard kill ends it
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        while True:
            time.sleep(0.05)
    if "DIE" in response:
        os._exit(3)
    if "WEIRD" in response:
        return 42
    return extract_boxed(response) == gold


def never_returns(gold: str, response: str) -> bool:
    while True:
        time.sleep(0.05)


# -- extraction -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{\frac{1}{\sqrt{2}}} done", r"\frac{1}{\sqrt{2}}"),
        (r"\boxed{1} then \boxed{ 2 }", "2"),
        (r"\boxed{1} and \fbox{x^{2}}", "x^{2}"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"\boxed{\boxed{7}}", r"\boxed{7}"),
        (r"\boxed 42.", "42."),
        (r"\boxed{1} then truncated \boxed{\frac{1}{2}", None),
        (r"\boxed{}", None),
        ("the answer is 5", None),
        ("", None),
        (None, None),
        (r"\boxedfoo{3}", None),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


# -- registry and graders -------------------------------------------------------------------------------


def test_registry_unknown_name_lists_valid_ones():
    with pytest.raises(UsageError) as err:
        resolve_grader("mathverify")
    assert "math_verify" in str(err.value) and "boxed_int" in str(err.value)


def test_registry_duplicate_and_bad_targets():
    reg = default_registry()
    with pytest.raises(UsageError, match="already registered"):
        reg.register("math_verify", scripted_grader)
    spec = reg.register("scripted", scripted_grader)
    assert spec.target == f"{__name__}:scripted_grader" and not spec.extract
    assert spec.label.startswith("scripted==src-")
    with pytest.raises(UsageError, match="already registered"):
        reg.register("scripted", f"{__name__}:never_returns")
    with pytest.raises(UsageError, match="module-level"):
        GraderRegistry().register("lam", lambda g, r: True)
    with pytest.raises(UsageError, match="no attribute"):
        resolve_grader(f"{__name__}:missing_function", trust_code=True)
    with pytest.raises(UsageError, match="cannot import"):
        resolve_grader("no_such_module_xyz:fn", trust_code=True)


def test_builtin_labels():
    assert resolve_grader("math_verify").label == f"math_verify=={math_verify_version()}+{RULES_VERSION}"
    assert resolve_grader("boxed_int").label.startswith("boxed_int==")


def test_boxed_int_and_normalize():
    assert boxed_int_grade("12", " 12 ") == "correct"
    assert boxed_int_grade("-3", "-3") == "correct"
    assert boxed_int_grade("1000", "1{,}000") == "correct"
    assert boxed_int_grade("12", "12.5") == "incorrect"
    assert boxed_int_grade("12", "x") == "incorrect"
    with pytest.raises(ValueError):
        boxed_int_grade("1/2", "1/2")
    assert normalize_grade(True) == "correct" and normalize_grade("timeout") == "timeout"
    with pytest.raises(ValueError):
        normalize_grade("right")


# -- pool: real math-verify -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mv_pool():
    with GradingPool("math_verify", workers=2, timeout_s=4.0) as pool:
        yield pool


def test_math_verify_grades(mv_pool):
    items = [
        (r"\frac{1}{2}", r"thus \boxed{0.5}"),
        (r"3\sqrt{13}", r"\boxed{3\sqrt{13}}"),  # bare gold would be mangled to 3 without the boxed wrap
        (r"3\sqrt{13}", r"\boxed{3}"),
        ("[1,2)", r"\boxed{[1, 2)}"),
        ("7", "no boxed answer"),
        ("7", r"\boxed{7"),
    ]
    res = mv_pool.grade(items)
    assert [r.grade for r in res] == ["correct", "correct", "incorrect", "correct", "invalid", "invalid"]
    assert res[0].extracted == "0.5" and res[4].extracted is None
    assert {r.grader for r in res} == {f"math_verify=={math_verify_version()}+{RULES_VERSION}"}
    extracted = mv_pool.grade([("2", "2"), ("2", None), ("2", "  ")], extracted=True)
    assert [r.grade for r in extracted] == ["correct", "invalid", "invalid"]


def test_cache_avoids_reverification():
    cache = GradeCache()
    with GradingPool("boxed_int", workers=1, timeout_s=5.0, cache=cache) as pool:
        first = pool.grade([("4", r"\boxed{4}"), ("4", r"\boxed{4}"), ("4", r"\boxed{5}")])
        assert pool.stats["graded"] == 2 and len(cache) == 2
        second = pool.grade([("4", "4"), ("4", "5")], extracted=True)
        assert pool.stats["graded"] == 2 and cache.hits >= 2
    assert [r.grade for r in first] == ["correct", "correct", "incorrect"]
    assert [r.grade for r in second] == ["correct", "incorrect"]


def test_majority_vote_groups_equivalent_answers(mv_pool):
    answers = ["3", "0.5", r"\frac{1}{2}", "3", "1/2", None]
    classes = mv_pool.equivalence_classes(answers)
    assert classes == [0, 1, 1, 0, 1, -1]
    correct = [r.grade == "correct" for r in mv_pool.grade([("1/2", a) for a in answers], extracted=True)]
    assert correct == [False, True, True, False, True, False]
    assert majority_correct(classes, correct) is True
    assert mv_pool.equivalent(r"\frac{1}{2}", "0.5") and not mv_pool.equivalent("3", "0.5")
    batch = mv_pool.equivalence_classes_batch([["2", "2.0", "3"], [None, None], ["x+1", "1+x"]])
    assert batch == [[0, 0, 1], [-1, -1], [0, 0]]


@pytest.mark.timeout(120)  # a hang guard for the whole test, not a performance assertion
def test_grinding_expression_is_bounded(mv_pool):
    res = mv_pool.grade([("2", r"\boxed{5^{5^{5^{5^5}}}}"), ("2", r"\boxed{2}")])
    assert res[0].grade in {"timeout", "incorrect"}
    assert res[1].grade == "correct"


# -- pool: custom graders that hang or die ----------------------------------------------------------------


@pytest.fixture(scope="module")
def scripted_pool():
    with GradingPool(f"{__name__}:scripted_grader", workers=2, timeout_s=1.0, trust_code=True) as pool:
        yield pool


def test_soft_hang_is_timeout_and_run_continues(scripted_pool):
    res = scripted_pool.grade([("1", r"\boxed{1}"), ("1", "HANG"), ("2", r"\boxed{2}"), ("2", r"\boxed{3}")])
    assert [r.grade for r in res] == ["correct", "timeout", "correct", "incorrect"]


def test_stuck_worker_is_killed_and_replaced(scripted_pool):
    killed, pids = scripted_pool.stats["killed"], set(scripted_pool.worker_pids())
    res = scripted_pool.grade([("1", "STUCK 1"), ("1", r"\boxed{1}"), ("5", r"\boxed{5} ok")])
    assert [r.grade for r in res] == ["timeout", "correct", "correct"]
    assert scripted_pool.stats["killed"] == killed + 1
    assert len(set(scripted_pool.worker_pids()) - pids) == 1  # exactly one worker replaced
    assert "hard timeout" in (res[0].detail or "")


def test_worker_death_is_error_and_pool_recovers(scripted_pool):
    died = scripted_pool.stats["died"]
    res = scripted_pool.grade([("1", "DIE now"), ("1", r"\boxed{1}"), ("9", "WEIRD")])
    assert [r.grade for r in res] == ["error", "correct", "error"]
    assert scripted_pool.stats["died"] == died + 1
    again = scripted_pool.grade([("8", r"\boxed{8}")])
    assert again[0].grade == "correct"


@pytest.mark.timeout(120)
def test_never_returning_grader_hits_the_limit():
    with GradingPool(f"{__name__}:never_returns", workers=1, timeout_s=0.5, trust_code=True) as pool:
        res = pool.grade([("1", r"\boxed{1}"), ("2", r"\boxed{2}"), ("3", r"\boxed{3}")])
    assert [r.grade for r in res] == ["timeout"] * 3


def test_custom_grader_gets_extracted_answer_boxed(scripted_pool):
    assert scripted_pool.equivalence_classes(["4", "4.0", "4"]) == [0, 1, 0]
    assert scripted_pool.grade([("4", None)], extracted=True)[0].grade == "invalid"


def test_bad_pool_arguments():
    with pytest.raises(UsageError):
        GradingPool("boxed_int", workers=0)
    with pytest.raises(UsageError):
        GradingPool("nope")
    with pytest.raises(UsageError):
        GradingPool("boxed_int", timeout_s=0)
