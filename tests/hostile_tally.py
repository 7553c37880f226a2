"""The hostile-input tally: every bad input of the hostile-input tests, run through the CLI, counted by what
the user saw.

    .venv/bin/python tests/hostile_tally.py [--json-out FILE] [-k EXPR]

runs the hostile-input test files under pytest with this module as a plugin. While a test runs (not while
its fixtures are built), the plugin records each CLI invocation: every ``CliRunner.invoke`` (the ``ares``
app in-process) and every ``subprocess.run`` of ``ares_cli`` (the console entry point, ``python -m
ares_cli.pipeline``). Each invocation is one bad input, classified from what came back and from the test's
verdict on it (its exit code and the words the user must see):

- ``clear_error``: a documented non-zero exit code, an ``error:`` line, no traceback, and the test passed;
- ``accepted_as_documented``: exit 0 and the test passed (a LaTeX label drawn as text, a read-only store
  that verifies with a warning, responses left out with a warning);
- ``traceback``: an exception escaped the CLI (in-process) or ``Traceback`` is in its output;
- ``silent``: exit 0 but the test expected a refusal (it failed);
- ``misleading``: refused, but with another exit code or without the words the test expects.

Tests marked ``valid_input`` (the working path beside a refusal) are left out of the count. The JSON goes to
stdout; pytest's own output to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RECORD_ENV = "ARES_HOSTILE_TALLY"
HOSTILE_FILES = (
    "tests/test_hostile_code.py",
    "tests/test_hostile_pipelines.py",
    "tests/test_hostile_inputs.py",
    "tests/test_hostile_curate.py",
    "tests/test_hostile_reports.py",
    "tests/test_hostile_store.py",
    "tests/test_hostile_sweep.py",
    "tests/test_bad_inputs.py",
)
DOCUMENTED_CODES = {1, 2, 3, 4, 75, 130}  # ares_cli/errors.py
CLASSES = ("clear_error", "accepted_as_documented", "traceback", "silent", "misleading")
TRACEBACK = "Traceback (most recent call last)"


def classify(call: dict, test_passed: bool) -> str:
    """One of :data:`CLASSES` for a recorded invocation and the verdict of the test that made it."""
    if call["traceback"]:
        return "traceback"
    if call["exit_code"] == 0:
        return "accepted_as_documented" if test_passed else "silent"
    if test_passed and call["said_error"] and call["exit_code"] in DOCUMENTED_CODES:
        return "clear_error"
    return "misleading"


GROUPS = ("data", "report", "artifacts", "toy", "pipeline")


def verb(argv: list[str]) -> str:
    """The command a user typed (``passrate``, ``data check``, ``pipeline render``), options left out."""
    words = list(argv)
    if len(words) > 2 and words[1] in ("-c", "-m"):  # [python, -c 'from ares_cli.main ...' | -m module, ...]
        words = (["pipeline"] if words[2] == "ares_cli.pipeline" else []) + words[3:]
    picked = []
    while words and len(picked) < 2:
        word = words.pop(0)
        if word == "--artifacts-root":
            words = words[1:]
        elif word.startswith("-"):
            if picked:
                break
        else:
            picked.append(word)
            if picked[0] not in GROUPS:
                break
    return " ".join(picked) or "?"


_LOGGING_ERROR = re.compile(r"--- Logging error ---\n.*?\nArguments: [^\n]*\n?", re.S)


def _without_harness_logging_errors(output: str) -> tuple[str, int]:
    """The output less logging's "--- Logging error ---" reports, and how many there were.

    In-process runs share one interpreter: a library's log handler bound to an earlier run's captured
    stderr (closed since) reports each later write with a traceback of its own. A process of the real
    ``ares`` has one stderr; these are the harness's, not the CLI's, and are counted apart."""
    cleaned, n = _LOGGING_ERROR.subn("", output)
    return cleaned, n


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Recorder:
    """A pytest plugin: records the CLI invocations of each test's call phase, then the test's outcome."""

    def __init__(self, out: Path):
        self.out, self.calls = out, None

    def _record(self, argv, exit_code: int, output: str, escaped: BaseException | None) -> None:
        if self.calls is not None:
            told, harness_errors = _without_harness_logging_errors(output)
            self.calls.append({
                "argv": [str(a) for a in argv], "exit_code": exit_code, "output": told[-600:],
                "traceback": escaped is not None or TRACEBACK in told, "said_error": "error" in told.lower(),
                "harness_logging_errors": harness_errors,
                "exception": None if escaped is None else f"{type(escaped).__name__}: {escaped}"[:300],
            })  # fmt: skip

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        from typer.testing import CliRunner

        real_invoke, real_run = CliRunner.invoke, subprocess.run
        recorder = self

        def invoke(runner, cli, args=None, *a, **kw):
            result = real_invoke(runner, cli, args, *a, **kw)
            exc = result.exception
            escaped = exc if exc is not None and not isinstance(exc, SystemExit) else None
            recorder._record(list(args or []), result.exit_code, result.output, escaped)
            return result

        def run(cmd, *a, check=False, **kw):
            proc = real_run(cmd, *a, **kw)
            words = [str(w) for w in (cmd if isinstance(cmd, (list, tuple)) else [cmd])]
            if any("ares_cli" in w for w in words):
                recorder._record(words, proc.returncode, _text(proc.stdout) + _text(proc.stderr), None)
            if check and proc.returncode:
                raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
            return proc

        self.calls = [] if item.get_closest_marker("valid_input") is None else None
        CliRunner.invoke, subprocess.run = invoke, run
        try:
            yield
        finally:
            CliRunner.invoke, subprocess.run = real_invoke, real_run
            item.stash[_CALLS] = self.calls or []
            self.calls = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.when == "call":
            with self.out.open("a") as fh:
                for rec in item.stash.get(_CALLS, []):
                    fh.write(json.dumps({"test": item.nodeid, "passed": report.passed, **rec}) + "\n")


_CALLS = pytest.StashKey[list]()


def pytest_configure(config):
    path = os.environ.get(RECORD_ENV)
    if path:
        config.pluginmanager.register(Recorder(Path(path)), "hostile-tally-recorder")


def tally(records: list[dict]) -> dict:
    """Counts by class, by command and by test, and every invocation that is not a clear outcome."""
    totals = dict.fromkeys(CLASSES, 0)
    by_command: dict[str, dict[str, int]] = {}
    by_test: dict[str, int] = {}
    codes: dict[str, int] = {}
    harness = 0
    problems = []
    for rec in records:
        kind = classify(rec, rec["passed"])
        totals[kind] += 1
        command = verb(rec["argv"])
        by_command.setdefault(command, dict.fromkeys(CLASSES, 0))[kind] += 1
        group = rec["test"].split("[")[0].split("::")[-1]
        by_test[group] = by_test.get(group, 0) + 1
        codes[str(rec["exit_code"])] = codes.get(str(rec["exit_code"]), 0) + 1
        harness += rec["harness_logging_errors"]
        if kind not in ("clear_error", "accepted_as_documented"):
            problems.append({"class": kind, "test": rec["test"], "argv": rec["argv"],
                             "exit_code": rec["exit_code"], "exception": rec["exception"],
                             "output": rec["output"][-300:]})  # fmt: skip
    by_command = {k: {c: n for c, n in v.items() if n} for k, v in sorted(by_command.items())}
    return {"bad_inputs": len(records), **totals, "exit_codes": dict(sorted(codes.items())),
            "harness_logging_errors": harness, "by_command": by_command, "by_test": dict(sorted(by_test.items())), "problems": problems}  # fmt: skip


def collect(files: list[str], pytest_args: list[str] = ()) -> tuple[list[dict], int]:
    """Run ``files`` under pytest with the recorder; (records, pytest's exit status)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "calls.jsonl"
        out.touch()
        env = os.environ | {
            RECORD_ENV: str(out),
            "PYTHONPATH": os.pathsep.join(
                [str(REPO / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        cmd = [sys.executable, "-m", "pytest", *files, "-q", "-p", "hostile_tally", "-p", "no:cacheprovider",
               "-m", "not gpu", *pytest_args]  # fmt: skip
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        sys.stderr.write(proc.stdout + proc.stderr)
        records = [json.loads(line) for line in out.read_text().splitlines() if line]
    return records, proc.returncode


# --- begin: hostile plan inputs (issue 34, parts 2-4: --gpu-memory, --throughput numbers and artifacts,
# DeepSpeed files, images inside parquet, a refused plan on stderr) ---------------------------------------
# tests/test_hostile_plan.py and test_hostile_deepspeed.py run each call under an alarm that raises PlanInputHang: such a call is a hang,
# not a traceback. Kept apart from the blocks above so other hostile classes can be added beside it.
HOSTILE_FILES += ("tests/test_hostile_plan.py", "tests/test_hostile_deepspeed.py")
CLASSES += ("hang",)
# exit 5 (EXIT_WONT_FIT): ares plan found the inputs valid and the GPUs too small, a documented refusal
DOCUMENTED_CODES = DOCUMENTED_CODES | {5}
HANG_EXCEPTION = "PlanInputHang"
_classify_without_hangs = classify


def classify(call: dict, test_passed: bool) -> str:  # noqa: F811 (extends the classifier above)
    """:func:`_classify_without_hangs`, and ``hang`` for a call the test's alarm stopped."""
    if (call.get("exception") or "").startswith(HANG_EXCEPTION) or HANG_EXCEPTION in call.get("output", ""):
        return "hang"
    return _classify_without_hangs(call, test_passed)


# --- end: hostile plan inputs ----------------------------------------------------------------------------


# --- begin: hostile model directories (issue 34, part 1: config.json, safetensors headers, weights files) --
# tests/test_hostile_models.py runs each in-process call under an alarm that raises ModelInputHang, and the
# FIFO / directory / sparse-file weights in a fresh interpreter the kernel ends 5 s after its imports
# (SIGALRM, exit -14): either is a hang, not a traceback.
HOSTILE_FILES += ("tests/test_hostile_models.py", "tests/test_hostile_weights.py")
MODEL_HANG_EXCEPTION = "ModelInputHang"
MODEL_HANG_EXIT = -14  # -signal.SIGALRM: the watched subprocess ran past its 5 s
_classify_without_model_hangs = classify


def classify(call: dict, test_passed: bool) -> str:  # noqa: F811 (extends the classifier above)
    """:func:`_classify_without_model_hangs`, and ``hang`` for a model-directory call its alarm stopped."""
    told = (call.get("exception") or "") + call.get("output", "")
    if MODEL_HANG_EXCEPTION in told or call["exit_code"] == MODEL_HANG_EXIT:
        return "hang"
    return _classify_without_model_hangs(call, test_passed)


# --- end: hostile model directories ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json-out", type=Path, help="also write the JSON here")
    parser.add_argument("-k", help="pytest -k expression (a subset of the cases)")
    parser.add_argument("files", nargs="*", help=f"test files (default: {', '.join(HOSTILE_FILES)})")
    args = parser.parse_args(argv)
    records, status = collect(list(args.files or HOSTILE_FILES), ["-k", args.k] if args.k else [])
    result = {"files": list(args.files or HOSTILE_FILES), "pytest_exit_status": status, **tally(records)}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    clean = all(result.get(kind, 0) == 0 for kind in ("traceback", "silent", "hang"))
    return 0 if clean and status == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
