"""``ares data check`` warns about golds the grader cannot read: control characters, empty golds, golds
that fail self-grading (each gold, boxed, graded against itself)."""

from __future__ import annotations

import json

from conftest import run_ares

from ares_cli.data.gold_check import gold_warnings

ROWS = [
    {"id": "frac", "source": "s", "problem": "p", "answer": "\x0crac{3}{8}"},  # "\frac" read as a JSON escape
    {"id": "empty", "source": "s", "problem": "p", "answer": "$ $"},
    {"id": "unbalanced", "source": "s", "problem": "p", "answer": "}{"},
    {"id": "fine", "source": "s", "problem": "p", "answer": r"\frac{1}{2}"},
    {"id": "time", "source": "s", "problem": "p", "answer": "4:45 \text{ p.m.}"},  # "\text" with a tab
    {"id": "prose", "source": "s", "problem": "p", "answer": r"\text{Player B wins}"},
]


def test_gold_warnings_by_kind():
    where = [("f.jsonl", i + 1) for i in range(len(ROWS))]
    warnings = gold_warnings(ROWS, where, grader="math", workers=1)
    kinds = {(w["id"], w["kind"]) for w in warnings}
    assert kinds == {
        ("frac", "control characters"),
        ("time", "control characters"),
        ("empty", "empty gold"),
        ("empty", "gold not graded correct against itself"),
        ("unbalanced", "gold not graded correct against itself"),
    }
    frac = next(w for w in warnings if w["id"] == "frac")
    assert (frac["file"], frac["row"], frac["field"]) == ("f.jsonl", 1, "answer")
    assert r"read as '\\frac{3}{8}'" in frac["detail"]
    assert not gold_warnings(ROWS[3:4], where[:1], grader="math", workers=1)
    # without self-grading only what the text shows is reported
    assert {w["kind"] for w in gold_warnings(ROWS, where, self_grade=False)} == {
        "control characters",
        "empty gold",
    }


def test_choice_golds_self_grade_through_their_options():
    rows = [
        {"id": "q1", "source": "s", "problem": "p", "answer": "B", "meta": {"options": ["1", "2"]}},
        {"id": "q2", "source": "s", "problem": "p", "answer": "7", "meta": {"options": ["1", "2"]}},
    ]
    warnings = gold_warnings(rows, [], grader="choice", workers=1)
    assert [w["id"] for w in warnings] == ["q2"] and "graded invalid" in warnings[0]["detail"]


def test_data_check_cli_warns_and_exits_zero(tmp_path):
    path = tmp_path / "golds.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = run_ares("--json", "data", "check", str(path), process=False, root=tmp_path / "art")
    summary = json.loads(out.stdout)
    assert summary["valid"] and summary["rows"] == len(ROWS)
    assert summary["gold_check"]["grader"] == "math_verify" and len(summary["gold_check"]["warnings"]) == 5
    assert f"warning: {path}:1 id 'frac' field answer: control characters" in out.stderr
    quick = run_ares(
        "--json", "data", "check", str(path), "--no-self-grade", process=False, root=tmp_path / "art"
    )
    assert len(json.loads(quick.stdout)["gold_check"]["warnings"]) == 3


def test_golds_self_grade_with_the_benchmarks_grading_options():
    rows = [
        {"id": "alts", "source": "s", "problem": "p", "answer": "['24/7', '3.429']"},
        {
            "id": "bad",
            "source": "s",
            "problem": "p",
            "answer": "['24/7', '}{']",
        },  # one alternative unreadable
        {"id": "one", "source": "s", "problem": "p", "answer": "2.0944"},
    ]
    warned = {w["id"] for w in gold_warnings(rows, [], grader="math[any_of=true,tolerance=0.001]", workers=1)}
    assert warned == {"bad"}
    per_row = [
        {"id": "c", "source": "s", "problem": "p", "answer": "145°", "meta": {"options": ["145°", "150°"]}},
        {"id": "m", "source": "s", "problem": "p", "answer": r"\frac{1}{2}"},
        {"id": "x", "source": "s", "problem": "p", "answer": "7", "meta": {"options": ["1", "2"]}},
    ]
    assert [w["id"] for w in gold_warnings(per_row, [], grader="choice_or_math", workers=1)] == ["x"]
