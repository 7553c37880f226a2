"""Problem record validation and JSONL helpers."""

from __future__ import annotations

import pytest

from ares_cli.data.jsonl import read_jsonl, write_jsonl
from ares_cli.data.records import normalise_answer, normalise_id, validate_problems
from ares_cli.errors import EXIT_INPUT, InputError, InputErrors
from ares_cli.store.hashing import sha256_records


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (27.0, "27"),
        (0.5, "0.5"),
        (-3.0, "-3"),
        (12, "12"),
        (" \\frac{1}{2} ", "\\frac{1}{2}"),
        ("27.0", "27.0"),
    ],
)
def test_normalise_answer(value, expected):
    assert normalise_answer(value) == expected


@pytest.mark.parametrize("value", [None, True, "", "  ", float("nan"), [1]])
def test_normalise_answer_rejects(value):
    with pytest.raises(ValueError):
        normalise_answer(value)


def test_normalise_id():
    assert normalise_id(7) == "7"
    assert normalise_id("a-1") == "a-1"
    for bad in ("", None, True, 1.5):
        with pytest.raises(ValueError):
            normalise_id(bad)


def test_validate_collects_every_error_with_row_and_field():
    rows = [
        {"id": 1, "source": "s", "problem": "p1", "answer": 2.0, "meta": {"difficulty": 1}},
        {"id": "1", "source": "s", "problem": "p2", "answer": "x"},  # duplicate of row 1 after str()
        {"id": "3", "source": "s", "problem": "", "answer": "x"},
        {"id": "4", "source": "s", "problem": "p", "answer": "x", "images": "a.png", "meta": [1]},
        {"id": "5", "source": "s", "problem": "p", "anwser": "x"},
    ]
    with pytest.raises(InputErrors) as info:
        validate_problems(rows, file="f.jsonl")
    found = {(e.file, e.row, e.field) for e in info.value.errors}
    assert found == {
        ("f.jsonl", 2, "id"),
        ("f.jsonl", 3, "problem"),
        ("f.jsonl", 4, "images"),
        ("f.jsonl", 4, "meta"),
        ("f.jsonl", 5, "anwser"),
        ("f.jsonl", 5, "answer"),
    }
    assert info.value.exit_code == EXIT_INPUT
    assert "first at row 1" in str(info.value)


def test_validate_normalises():
    out = validate_problems([{"id": 3, "source": "amc", "problem": "p", "answer": 27.0, "images": ["a.png"]}])
    assert out == [{"id": "3", "source": "amc", "problem": "p", "answer": "27", "images": ["a.png"]}]


def test_read_jsonl_names_malformed_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n{"a": \n\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(InputErrors) as info:
        read_jsonl(path)
    assert [(e.row, e.file) for e in info.value.errors] == [(2, str(path)), (4, str(path))]
    path.write_text('{"a": 1}\n{oops}\n', encoding="utf-8")
    with pytest.raises(InputError) as single:
        read_jsonl(path)
    assert single.value.row == 2 and "malformed JSON" in str(single.value)


def test_write_read_roundtrip_and_hash(tmp_path):
    rows = [{"id": "a", "text": "é"}, {"id": "b", "n": 2}]
    path = tmp_path / "sub" / "out.jsonl"
    assert write_jsonl(path, rows) == 2
    assert read_jsonl(path) == rows
    assert not list(path.parent.glob(".*tmp"))
    assert sha256_records(rows) == sha256_records([dict(reversed(list(r.items()))) for r in rows])
    assert sha256_records(rows) != sha256_records(rows[:1])
