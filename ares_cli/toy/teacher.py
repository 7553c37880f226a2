"""Teacher: writes step-by-step traces, slips more on later steps, and can verify steps to catch slips.

A step line is ``37+8=45``. A verified step adds a real recheck: ``, check 45-8=37 ok`` (the inverse
operation for ``+``/``-``; a tens/units decomposition for ``*``). When the written result was a slip the
recheck disagrees and the teacher writes ``wait, 37+8=45`` and continues from the corrected value; an
unverified slip propagates to the final ``\\boxed{}`` answer.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from ares_cli.errors import UsageError
from ares_cli.toy.tasks import apply_op, parse_problem


@dataclass(frozen=True)
class TeacherConfig:
    """Slip rate ``slip_base + slip_per_step * step_index`` and the chance of verifying each step."""

    slip_base: float = 0.03
    slip_per_step: float = 0.02
    verify_prob: float = 0.0

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not 0.0 <= value <= 1.0:
                raise UsageError(f"TeacherConfig.{name} must be in [0, 1], got {value}")

    def slip_prob(self, step_index: int) -> float:
        """Chance of writing a wrong result at ``step_index`` (0-based)."""
        return min(1.0, self.slip_base + self.slip_per_step * step_index)


def _slipped(rng: random.Random, correct: int) -> int:
    """A plausible wrong result near ``correct`` (never equal; negative only if ``correct`` is)."""
    delta = rng.choice([1, 2, 3, 5, 9, 10, 11, 20])
    if correct - delta >= min(0, correct) and rng.random() < 0.5:
        return correct - delta
    return correct + delta


def recheck(value: int, op: str, operand: int, written: int) -> tuple[str, bool]:
    """The recheck text for ``value op operand = written`` and whether it confirms ``written``."""
    if op == "+":
        back = written - operand
        return f"check {written}-{operand}={back}", back == value
    if op == "-":
        back = written + operand
        return f"check {written}+{operand}={back}", back == value
    tens, units = value - value % 10, value % 10
    redo = tens * operand + units * operand
    return (
        f"check {tens}*{operand}+{units}*{operand}={tens * operand}+{units * operand}={redo}",
        redo == written,
    )


def write_trace(
    problem: str,
    config: TeacherConfig,
    rng: random.Random,
    *,
    forced_slips: dict[int, int] | None = None,
    forced_verify: set[int] | None = None,
) -> str:
    """A trace for ``problem`` ending in ``\\boxed{<int>}``.

    ``forced_slips`` maps a step index to the wrong result to write there; ``forced_verify`` names steps
    that are verified regardless of ``config.verify_prob`` (both for tests and demonstrations).
    """
    start, steps = parse_problem(problem)
    forced_slips = forced_slips or {}
    forced_verify = forced_verify or set()
    value, lines = start, []
    for index, (op, operand) in enumerate(steps):
        correct = apply_op(value, op, operand)
        slip = index in forced_slips or rng.random() < config.slip_prob(index)
        written = forced_slips.get(index, _slipped(rng, correct) if slip else correct)
        line = f"{value}{op}{operand}={written}"
        verify = index in forced_verify or rng.random() < config.verify_prob
        if verify:
            check_text, confirmed = recheck(value, op, operand, written)
            line += (
                f", {check_text} ok" if confirmed else f", {check_text} wait, {value}{op}{operand}={correct}"
            )
            written = written if confirmed else correct
        lines.append(line)
        value = written
    lines.append(f"The answer is \\boxed{{{value}}}")
    return "\n".join(lines)


def last_boxed_int(text: str) -> int | None:
    """The integer inside the last ``\\boxed{...}`` of ``text``, or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    end = text.find("}", start)
    if end < 0:
        return None
    inner = text[start + len("\\boxed{") : end].strip()
    try:
        return int(inner)
    except ValueError:
        return None
