"""Toy task generator and teacher: determinism, disjoint splits, traces that end in the right answer."""

from __future__ import annotations

import random

import pytest

from ares_cli.errors import InputError, UsageError
from ares_cli.toy.tasks import (
    MAX_DIFFICULTY,
    MAX_VALUE,
    SPLIT_SIZES,
    generate_all_splits,
    generate_split,
    load_split,
    parse_problem,
    regenerate_splits,
    solve,
)
from ares_cli.toy.teacher import TeacherConfig, last_boxed_int, recheck, write_trace


def test_generator_is_deterministic_and_seed_dependent():
    first = generate_split("train", 50, seed=7)
    assert first == generate_split("train", 50, seed=7)
    assert first != generate_split("train", 50, seed=8)


def test_records_have_schema_difficulty_and_correct_answers():
    records = generate_split("val", 3 * MAX_DIFFICULTY, seed=1)
    assert [r["meta"]["difficulty"] for r in records[:MAX_DIFFICULTY]] == list(range(1, MAX_DIFFICULTY + 1))
    for index, record in enumerate(records):
        assert record["id"] == f"toy-val-{index:06d}"
        assert record["source"] == "toy"
        start, steps = parse_problem(record["problem"])
        assert len(steps) == record["meta"]["difficulty"]
        assert record["answer"] == str(solve(start, steps))
        value = start
        for op, operand in steps:
            value = solve(value, [(op, operand)])
            assert 0 <= value <= MAX_VALUE


def test_shipped_splits_are_disjoint_balanced_and_equal_regeneration(tmp_path):
    splits = {name: load_split(name) for name in SPLIT_SIZES}
    texts = {name: {r["problem"] for r in records} for name, records in splits.items()}
    for name, records in splits.items():
        assert len(records) == SPLIT_SIZES[name] == len(texts[name])
        counts = [sum(r["meta"]["difficulty"] == d for r in records) for d in range(1, MAX_DIFFICULTY + 1)]
        assert max(counts) - min(counts) <= 1
    assert not texts["train"] & texts["val"]
    assert not texts["train"] & texts["test"]
    assert not texts["val"] & texts["test"]
    assert splits == generate_all_splits()
    paths = regenerate_splits(tmp_path)
    for name, path in paths.items():
        shipped = (load_split.__globals__["DATA_DIR"] / f"{name}.jsonl").read_bytes()
        assert path.read_bytes() == shipped


def test_parse_problem_rejects_other_text():
    with pytest.raises(InputError):
        parse_problem("What is 2+2?")


def test_trace_without_slips_ends_in_gold_answer():
    config = TeacherConfig(slip_base=0.0, slip_per_step=0.0, verify_prob=0.5)
    for record in generate_split("test", 40, seed=3):
        trace = write_trace(record["problem"], config, random.Random(0))
        assert trace.endswith(f"\\boxed{{{record['answer']}}}")
        assert last_boxed_int(trace) == int(record["answer"])
        assert len(trace.splitlines()) == record["meta"]["difficulty"] + 1


def test_unverified_slip_propagates_and_verification_catches_it():
    problem = "Start at 37, then +8, *3, -15."
    clean = TeacherConfig(slip_base=0.0, slip_per_step=0.0)
    terse = write_trace(problem, clean, random.Random(0), forced_slips={0: 46})
    assert terse.splitlines()[0] == "37+8=46"
    assert last_boxed_int(terse) == (46 * 3) - 15
    checked = write_trace(problem, clean, random.Random(0), forced_slips={0: 46}, forced_verify={0})
    assert checked.splitlines()[0] == "37+8=46, check 46-8=38 wait, 37+8=45"
    assert checked.splitlines()[1].startswith("45*3=135")
    assert last_boxed_int(checked) == 120


@pytest.mark.parametrize(
    ("value", "op", "operand", "written", "confirmed"),
    [(45, "*", 3, 135, True), (45, "*", 3, 145, False), (50, "-", 7, 43, True), (50, "-", 7, 42, False)],
)
def test_recheck_confirms_only_correct_results(value, op, operand, written, confirmed):
    text, ok = recheck(value, op, operand, written)
    assert ok is confirmed
    assert text.startswith("check ")


def test_verbose_teacher_is_more_accurate_on_hard_problems():
    records = [r for r in generate_split("train", 400, seed=5) if r["meta"]["difficulty"] == MAX_DIFFICULTY]
    rng = random.Random(1)

    def accuracy(verify_prob):
        config = TeacherConfig(verify_prob=verify_prob)
        return sum(
            last_boxed_int(write_trace(r["problem"], config, rng)) == int(r["answer"]) for r in records
        ) / len(records)

    assert accuracy(1.0) == 1.0
    assert accuracy(0.0) < 0.7


def test_teacher_config_validates_probabilities():
    with pytest.raises(UsageError):
        TeacherConfig(verify_prob=1.5)


def test_last_boxed_int():
    assert last_boxed_int("a \\boxed{3} then \\boxed{12}") == 12
    assert last_boxed_int("\\boxed{x}") is None
    assert last_boxed_int("no answer") is None


def test_teacher_terminates_when_slips_drive_values_negative():
    always_slip = TeacherConfig(slip_base=1.0, slip_per_step=0.0)
    trace = write_trace("Start at 10, then -9, -1, -5.", always_slip, random.Random(0), forced_slips={0: 0})
    assert trace.splitlines()[1].startswith("0-1=")
    assert last_boxed_int(trace) is not None
    for record in generate_split("train", 200, seed=9):
        assert last_boxed_int(write_trace(record["problem"], always_slip, random.Random(2))) is not None
