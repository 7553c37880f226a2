"""The grade-error check: a stage fails when its grader errs on too many samples (an ``error`` grade scores
0, so a broken grader must stop a run rather than train or score it). Sampling stages check every
chunk and the whole run; RL checks each step's grades once there are enough of them."""

from __future__ import annotations

from ares_cli.errors import StageFailure

ERROR_CHECK_MIN_SAMPLES = 64  # RL checks a step's error rate once it has this many grades


def check_grade_errors(
    grades: list[str], max_rate: float, grader: str, first_error: list[str | None]
) -> None:
    """StageFailure when the fraction of ``error`` grades exceeds ``max_rate``, naming the grader."""
    errors = grades.count("error")
    if grades and errors / len(grades) > max_rate:
        detail = f"; first error: {first_error[0]}" if first_error and first_error[0] else ""
        raise StageFailure(
            f"grader {grader} failed on {errors} of {len(grades)} samples ({errors / len(grades):.0%}, over "
            f"max_grade_error_rate {max_rate:g}){detail}"
        )
