"""The hostile-input tally (tests/hostile_tally.py) counts what it is meant to: each class from a run of
its own pytest over a small CLI whose outcomes are known, invocations in fixtures and ``valid_input``
tests left out, and logging's reports about a closed harness stream not taken for the CLI's tracebacks."""

from __future__ import annotations

import textwrap

from hostile_tally import classify, collect, tally, verb

TESTS = """
import pytest
import typer
from typer.testing import CliRunner

app = typer.Typer()


@app.command()
def run(what: str) -> None:
    if what == "refuse":
        typer.echo("error: data.jsonl, row 2, field 'answer': not a number", err=True)
        raise typer.Exit(3)
    if what == "boom":
        raise ValueError("a traceback")
    typer.echo("ok")


def invoke(what):
    return CliRunner().invoke(app, [what])


@pytest.fixture()
def built():
    return invoke("fine")  # a fixture's invocation: setup, not a bad input


def test_refused_clearly(built):
    assert invoke("refuse").exit_code == 3


def test_accepted_as_documented():
    assert invoke("fine").exit_code == 0


def test_silently_accepted():
    assert invoke("fine").exit_code == 3


def test_traceback():
    assert invoke("boom").exit_code == 3


def test_wrong_code():
    assert invoke("refuse").exit_code == 2


@pytest.mark.valid_input
def test_the_working_path():
    assert invoke("fine").exit_code == 0
"""


def test_a_tally_of_known_outcomes(tmp_path):
    path = tmp_path / "test_known_outcomes.py"
    path.write_text(textwrap.dedent(TESTS))
    records, status = collect([str(path)])
    assert status == 1  # three of the tests fail
    by_test = {r["test"].split("::")[-1]: classify(r, r["passed"]) for r in records}
    assert by_test == {
        "test_refused_clearly": "clear_error",
        "test_accepted_as_documented": "accepted_as_documented",
        "test_silently_accepted": "silent",
        "test_traceback": "traceback",
        "test_wrong_code": "misleading",
    }
    counts = tally(records)
    assert counts["bad_inputs"] == 5 and counts["exit_codes"] == {"0": 2, "1": 1, "3": 2}
    assert [p["class"] for p in counts["problems"]] == ["silent", "traceback", "misleading"]


def _call(code: int, output: str, **extra) -> dict:
    return {"argv": [], "exit_code": code, "output": output, "traceback": False,
            "said_error": "error" in output.lower(), "harness_logging_errors": 0, **extra}  # fmt: skip


def test_classes_from_exit_code_output_and_verdict():
    assert classify(_call(3, "error: x.jsonl, row 1"), True) == "clear_error"
    assert classify(_call(3, "refused"), True) == "misleading"  # no error line
    assert classify(_call(9, "error: x"), True) == "misleading"  # not a documented code
    assert classify(_call(3, "error: x"), False) == "misleading"
    assert classify(_call(0, "warning: left out"), True) == "accepted_as_documented"
    assert classify(_call(0, ""), False) == "silent"
    assert classify(_call(3, "error: x", traceback=True), True) == "traceback"


def test_a_logging_report_about_a_closed_stream_is_not_the_clis_traceback():
    from hostile_tally import _without_harness_logging_errors

    report = ("--- Logging error ---\nTraceback (most recent call last):\n  File \"logging\", line 1\n"
              "ValueError: I/O operation on closed file.\nCall stack:\n  File \"x\"\n"
              "Message: 'Token indices'\nArguments: ()\n")  # fmt: skip
    cleaned, n = _without_harness_logging_errors(f"{report}error: prompt too long\n{report}")
    assert cleaned == "error: prompt too long\n" and n == 2
    real = "Traceback (most recent call last):\n  File \"ares\"\nKeyError: 'step'\n"
    assert _without_harness_logging_errors(real) == (real, 0)


def test_the_command_is_named_without_its_options():
    assert verb(["--artifacts-root", "/r", "--json", "eval", "--data", "d"]) == "eval"
    assert verb(["data", "check", "x.jsonl"]) == "data check"
    assert verb(["/usr/bin/python3", "-m", "ares_cli.pipeline", "render", "p.yaml"]) == "pipeline render"
    assert verb(["python", "-c", "from ares_cli.main import main; main()", "report", "compare", "a=b"]) == (
        "report compare"
    )
