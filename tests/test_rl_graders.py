"""A deterministic stand-in grader for RL tests: a random tiny model never solves a problem, so tests grade
``correct`` when the response text has an even number of characters (about half of them), which gives
groups with varied rewards and non-zero advantages. Importable by grading workers by name."""

from __future__ import annotations


def parity_grade(gold: str, response: str) -> bool:
    return len(response) % 2 == 0


def test_parity_grade():
    assert parity_grade("1", "ab") and not parity_grade("1", "abc")


def broken_grade(gold: str, response: str) -> bool:
    """Fails on every response with an odd number of characters (about half of them)."""
    if len(response) % 2:
        raise RuntimeError("no parser for this answer")
    return True
