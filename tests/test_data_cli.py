"""``ares data check`` / ``ares data list``: every bad row named, exit 3, JSON summary on stdout."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ares_cli.commands import data as data_cmd
from ares_cli.data.summary import answer_type, check_source, difficulty_histogram
from ares_cli.errors import EXIT_INPUT, InputErrors

BAD_LINES = [
    '{"id": "a", "source": "s", "problem": "1+1?", "answer": "2"}',
    '{"id": "b", "source": "s", "problem": "2+2?", "answer": ',  # malformed JSON
    '{"id": "c", "source": "s", "problem": "3+3?", "answer": "6"}',
    '{"id": "a", "source": "s", "problem": "dup", "answer": "0"}',  # duplicate id
    '{"id": "e", "source": "s", "problem": "no answer"}',  # missing answer
]


@pytest.fixture
def bad_file(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(BAD_LINES) + "\n", encoding="utf-8")
    return path


def _located(err: InputErrors):
    return {(e.file, e.row, e.field) for e in err.errors}


def test_check_names_every_bad_row(bad_file):
    with pytest.raises(InputErrors) as info:
        check_source(str(bad_file))
    assert info.value.exit_code == EXIT_INPUT
    assert _located(info.value) == {
        (str(bad_file), 2, None),
        (str(bad_file), 4, "id"),
        (str(bad_file), 5, "answer"),
    }
    text = str(info.value)
    assert (
        "row 2" in text
        and "malformed JSON" in text
        and "duplicate id 'a'" in text
        and "field 'answer'" in text
    )


def test_check_subcommand_raises_input_errors(bad_file):
    result = CliRunner().invoke(data_cmd.app, ["check", str(bad_file)])
    assert isinstance(result.exception, InputErrors) and result.exception.exit_code == EXIT_INPUT
    assert _located(result.exception) == _located(
        pytest.raises(InputErrors, check_source, str(bad_file)).value
    )


def test_root_app_maps_to_exit_3(bad_file):
    from ares_cli.main import app as root_app

    result = CliRunner().invoke(root_app, ["data", "check", str(bad_file)])
    assert result.exit_code == EXIT_INPUT
    assert "row 4" in result.output and "row 5" in result.output


def test_check_json_summary(tmp_path):
    path = tmp_path / "ok.jsonl"
    rows = [
        {"id": i, "source": "toy" if i < 3 else "other", "problem": "x" * (10 + i), "answer": a,
         "meta": {"difficulty": d}}
        for i, (a, d) in enumerate([("1", 2), ("1/2", 1), ("\\sqrt{2}", 2), ("0.5", 10), ("yes", None)])
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = CliRunner().invoke(data_cmd.app, ["check", str(path), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["rows"] == 5 and summary["valid"] is True
    assert summary["sources"] == {"toy": 3, "other": 2}
    assert summary["answer_types"] == {"integer": 1, "fraction": 1, "latex": 1, "decimal": 1, "text": 1}
    assert summary["difficulty"] == {"1": 1, "2": 2, "10": 1, "none": 1}
    assert summary["problem_chars"] == {"min": 10, "mean": 12.0, "median": 12.0, "max": 14}
    assert summary["provenance"]["kind"] == "file" and summary["provenance"]["rows"] == 5


def test_summary_helpers():
    assert [answer_type(a) for a in ["-3", "1,000", "2.5", "3/4", "\\pi", "B"]] == [
        "integer", "integer", "decimal", "fraction", "latex", "text",
    ]  # fmt: skip
    assert difficulty_histogram([{"meta": {}}, {}]) == {}
    assert list(difficulty_histogram([{"meta": {"difficulty": d}} for d in ["hard", "easy", "easy"]])) == [
        "easy", "hard",
    ]  # fmt: skip


def test_list_manifests(monkeypatch):
    monkeypatch.delenv("ARES_MANIFESTS", raising=False)
    result = CliRunner().invoke(data_cmd.app, ["list"], obj=None)
    assert result.exit_code == 0, result.output
    names = result.stdout.split()
    assert {"math500", "gsm8k", "aime2025", "toy-train"} <= set(names)
