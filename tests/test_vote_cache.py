"""The majority vote never re-verifies: cached pairs are not sent again, and an answer that timed out once is
compared with nothing (counted by the tasks sent to the grader workers, not by timing)."""

from __future__ import annotations

import time

import pytest

from ares_cli.grading import GradingPool, extract_boxed


def hangs_when_marked(gold: str, response: str) -> bool:
    """Compares boxed answers; hangs (until the pool's timeout) on any response containing HANG."""
    if "HANG" in response:
        while True:
            time.sleep(0.05)
    return extract_boxed(response) == gold


@pytest.fixture
def pool():
    with GradingPool(f"{__name__}:hangs_when_marked", workers=1, timeout_s=0.4, trust_code=True) as p:
        sent: list[tuple[str, str]] = []
        run = p.run

        def recording_run(tasks):
            sent.extend(tasks)
            return run(tasks)

        p.run = recording_run  # type: ignore[method-assign]
        p.sent = sent  # type: ignore[attr-defined]
        yield p


def test_vote_skips_answers_that_timed_out_in_grading_and_reuses_the_cache(pool):
    answers = ["1", "1", "HANG", "2", "HANG", "HANG"]
    grades = pool.grade([("1", f"so \\boxed{{{a}}}") for a in answers])
    assert [g.grade for g in grades] == ["correct", "correct", "timeout", "incorrect", "timeout", "timeout"]
    pool.sent.clear()
    classes = pool.equivalence_classes_batch([answers])
    assert classes == [[0, 0, 1, 2, 1, 1]]
    assert not [t for t in pool.sent if "HANG" in t[1]]  # the hung answer is never graded again
    assert len(pool.sent) == 1  # only "2" against the representative "1"
    pool.sent.clear()
    assert pool.equivalence_classes_batch([answers]) == classes
    assert pool.sent == []  # every comparison is a cache hit the second time


def test_vote_trusts_timeouts_recorded_on_disk(pool):
    """A resumed eval passes the answers graded ``timeout`` in its sample rows: they are not retried."""
    classes = pool.equivalence_classes_batch([["7", "xHANG", "7.0", "xHANG"]], unverifiable=["xHANG"])
    assert classes == [[0, 1, 2, 1]]
    assert [t for t in pool.sent if "HANG" in t[1]] == []
    assert pool.stats["killed"] == 0


def test_a_timeout_inside_the_vote_is_not_repeated(pool):
    """Without any earlier grade, a hung answer costs one timed-out comparison, not one per class."""
    answers = ["1", "yHANG", "2", "3", "4"]
    classes = pool.equivalence_classes_batch([answers])
    assert classes == [[0, 1, 2, 3, 4]]
    assert len([t for t in pool.sent if "HANG" in t[1]]) == 1
    assert "yHANG" in pool.timed_out
