"""The preparation steps a stage runs before it opens its ``.partial`` directory or loads any weights.

Each stage's ``prepare_*`` function (config, cross-key rules, model directory, data, batch arithmetic) runs
its steps through a :class:`Checklist`. The stage uses a strict one: the first failing step raises its
error, with its exit code, exactly as before. ``ares plan`` uses a collecting one: every step runs, a
failure is recorded with its message and exit code, steps that need a failed step's result are recorded
as skipped, and the report lists them all. One code path, so the plan checks what the stage checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from ares_cli.errors import EXIT_INPUT, AresError, InputErrors

T = TypeVar("T")
Status = Literal["ok", "warn", "fail", "skipped"]


@dataclass
class CheckResult:
    """One step's outcome: ``detail`` says what was found (or the error), ``problems`` lists each row or key
    at fault when the step found several."""

    name: str
    status: Status
    detail: str = ""
    exit_code: int = 0
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "status": self.status, "detail": self.detail}
        if self.exit_code:
            out["exit_code"] = self.exit_code
        if self.problems:
            out["problems"] = self.problems
        return out


class Checklist:
    """Runs named preparation steps: strict (raise the first error) or collecting (record every outcome)."""

    def __init__(self, *, collect: bool = False):
        self.collect = collect
        self.results: list[CheckResult] = []

    def run(self, name: str, fn: Callable[[], T], describe: Callable[[T], str] | None = None) -> T | None:
        """``fn()``'s value; in a collecting checklist an :class:`AresError` is recorded and None returned."""
        if not self.collect:
            return fn()
        try:
            value = fn()
        except AresError as err:
            self.fail(name, err)
            return None
        self.ok(name, describe(value) if describe is not None and value is not None else "")
        return value

    def ok(self, name: str, detail: str = "") -> None:
        self.results.append(CheckResult(name, "ok", detail))

    def warn(self, name: str, detail: str, problems: list[str] | None = None) -> None:
        self.results.append(CheckResult(name, "warn", detail, problems=list(problems or [])))

    def fail(self, name: str, err: AresError) -> None:
        """Record ``err`` (strict checklists raise it); several input errors are listed one per problem."""
        if not self.collect:
            raise err
        problems = [str(e) for e in err.errors] if isinstance(err, InputErrors) else []
        detail = f"{len(problems)} problem(s)" if problems else str(err)
        self.results.append(CheckResult(name, "fail", detail, err.exit_code, problems))

    def fail_input(self, name: str, detail: str, problems: list[str]) -> None:
        """A failure found by a check that collects its own problems (exit 3)."""
        if not self.collect:
            from ares_cli.errors import InputError

            raise InputErrors([InputError(p) for p in problems]) if problems else InputError(detail)
        self.results.append(CheckResult(name, "fail", detail, EXIT_INPUT, list(problems)))

    def skip(self, name: str, because: str) -> None:
        if self.collect:
            self.results.append(CheckResult(name, "skipped", because))

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]
