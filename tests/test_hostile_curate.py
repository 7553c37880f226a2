"""`ares curate` under hostile or careless inputs, through the CLI: each case names its file, row and field
with its exit code, before the stage opens its partial directory.

Pass rates must be for problems of the data; responses for problems without a pass rate are left out
with a warning (all of them: exit 3 naming the file and ids); a quota of 0 is a usage error; a source with
LaTeX in it does not break the figure written after the work.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from input_rows import write_jsonl as _jsonl
from typer.testing import CliRunner

from ares_cli.main import app


@pytest.fixture()
def files(tmp_path) -> dict[str, Path]:
    sources = ["$\\frac{$", "_hidden"]
    problems = [
        {"id": f"p{i}", "source": sources[i % 2], "problem": f"q{i}", "answer": "2"} for i in range(6)
    ]
    rates = [{"problem_id": f"p{i}", "source": sources[i % 2], "k": 4, "n_correct": i % 5} for i in range(6)]
    responses = [{"problem_id": f"p{i}", "response": "\\boxed{2}" + " x" * j, "n_tokens": 5 + i + j,
                  "correct": j % 2 == 0} for i in range(6) for j in range(3)]  # fmt: skip
    return {
        "tmp": tmp_path,
        "data": _jsonl(tmp_path / "problems.jsonl", problems),
        "rates": _jsonl(tmp_path / "rates.jsonl", rates),
        "responses": _jsonl(tmp_path / "responses.jsonl", responses),
        "unknown": _jsonl(tmp_path / "unknown.jsonl", [dict(r, problem_id=f"zz{i}") for i, r in enumerate(responses[:4])]),
        "some": _jsonl(tmp_path / "some.jsonl", [*responses, dict(responses[0], problem_id="zz")]),
        "bad_tokens": _jsonl(tmp_path / "bad_tokens.jsonl", [*responses[:3], dict(responses[3], n_tokens="many")]),
        "bad_idx": _jsonl(tmp_path / "bad_idx.jsonl", [dict(responses[0], sample_idx="first")]),
        "bad_text": _jsonl(tmp_path / "bad_text.jsonl", [dict(responses[0], response=7)]),
        "no_id": _jsonl(tmp_path / "no_id.jsonl", [{"response": "r", "n_tokens": 1, "correct": True}]),
        "ghost": _jsonl(tmp_path / "ghost.jsonl", [*rates, {"problem_id": "ghost", "k": 4, "n_correct": 1}]),
        "no_k": _jsonl(tmp_path / "no_k.jsonl", [{"problem_id": "p1", "pass_rate": 0.5}]),
    }  # fmt: skip


def _curate(files, *argv: str):
    root = files["tmp"] / "artifacts"
    args = [a.format(**files) for a in argv]
    result = CliRunner().invoke(app, ["--artifacts-root", str(root), "curate", *args])
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    return result.exit_code, " ".join(result.output.split()), root


BASE = ["--passrates", "{rates}", "--data", "{data}"]
CASES = [
    ("per-bracket-zero", [*BASE, "--responses", "{responses}", "--per-bracket", "0"], 2,
     ["per_bracket must be >= 1, got 0"]),
    ("size-zero", [*BASE, "--responses", "{responses}", "--size", "0"], 2, ["size must be >= 1, got 0"]),
    ("all-responses-unknown", [*BASE, "--responses", "{unknown}", "--per-bracket", "1"], 3,
     ["unknown.jsonl, field 'problem_id'", "no response is for a problem with a pass rate",
      "4 unknown problem ids, e.g. 'zz0', 'zz1'"]),
    ("response-row-names-its-file", [*BASE, "--responses", "{bad_tokens}", "--per-bracket", "1"], 3,
     ["bad_tokens.jsonl, row 4, field 'n_tokens'", "got 'many'"]),
    ("sample-idx-not-int", [*BASE, "--responses", "{bad_idx}", "--per-bracket", "1"], 3,
     ["bad_idx.jsonl, row 1, field 'sample_idx'", "must be an integer, got 'first'"]),
    ("response-not-text", [*BASE, "--responses", "{bad_text}", "--per-bracket", "1"], 3,
     ["bad_text.jsonl, row 1, field 'response'", "response must be text, got 7"]),
    ("response-without-id", [*BASE, "--responses", "{no_id}", "--per-bracket", "1"], 3,
     ["no_id.jsonl, row 1, field 'problem_id'"]),
    ("pass-rate-for-unknown-problem", ["--passrates", "{ghost}", "--data", "{data}", "--responses", "{responses}"],
     3, ["ghost.jsonl, row 7, field 'problem_id'", "pass rate for problem 'ghost', which is not in the problem data"]),
    ("pass-rate-without-k", ["--passrates", "{no_k}", "--data", "{data}", "--responses", "{responses}"], 3,
     ["no_k.jsonl, row 1, field 'k'", "k must be a positive integer (brackets are n_correct/k), got None"]),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "code", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_curate_input_is_named_before_the_stage_opens(files, argv, code, fragments):
    got, text, root = _curate(files, *argv)
    assert got == code, text
    for fragment in fragments:
        assert fragment in text, text
    assert "no problem has a correct candidate" not in text
    assert not list(root.glob("curate/*.partial"))


def test_responses_for_problems_without_a_pass_rate_are_left_out_with_a_warning(files):
    code, text, root = _curate(files, *BASE, "--responses", "{some}", "--per-bracket", "1")
    assert code == 0, text
    assert (
        "warning:" in text
        and "some.jsonl: 1 response(s) of 1 problem(s) without a pass rate are left out" in text
    )
    manifest = json.loads(next(root.glob("curate/curate-*/manifest.json")).read_text())
    assert manifest["stats"]["unknown_candidates"] == 1


def test_latex_and_underscore_sources_do_not_break_the_curate_figure(files):
    """The figure is drawn after the work: a mathtext error there left a partial directory behind."""
    code, text, root = _curate(files, *BASE, "--responses", "{responses}", "--per-bracket", "1")
    assert code == 0, text
    (artifact,) = root.glob("curate/curate-*")
    assert (artifact / "length_vs_passrate.png").stat().st_size > 1000
    assert not list(root.glob("curate/*.partial"))
