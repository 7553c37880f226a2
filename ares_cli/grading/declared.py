"""The grader a dataset is graded with: the run's ``--grader`` or the manifest's, with the grading options
its manifest declares (:mod:`ares_cli.grading.options`). Every stage asks here (eval, suite, passrate, rl,
plan, data check), so a benchmark's conventions reach the same grading call everywhere.
"""

from __future__ import annotations

from ares_cli.grading.options import GradingOptions, join_ref, options_from_mapping, split_ref
from ares_cli.grading.registry import ALIASES, JUDGE_NAME

__all__ = ["benchmark_grader", "grader_for"]


def benchmark_grader(grader: str | None, declared: str | None, options: GradingOptions | None) -> str:
    """The grader a benchmark is graded with: ``grader`` (the run's ``--grader``, None when not given), else
    the manifest's ``declared`` one (default ``math_verify``), with the manifest's grading ``options``.

    A benchmark's options are its conventions, so they also go with a ``--grader`` of the same grader as
    the manifest's (``math`` for a manifest's ``math_verify``, and the rules of ``math+judge``), unless that
    ``--grader`` gives options of its own; a different grader gets none of them."""
    declared = declared or "math_verify"
    if grader is None:
        return join_ref(declared, options) if options is not None and "[" not in declared else declared
    if options is None:
        return grader
    judged = JUDGE_NAME.match(grader)
    rules = judged["rules"] if judged else grader
    if rules is None or "[" in rules or ":" in rules:
        return grader
    base, _ = split_ref(declared)
    if ALIASES.get(rules, rules) != ALIASES.get(base, base):
        return grader
    ref = join_ref(rules, options)
    return grader.replace(rules, ref, 1) if judged else ref


def grader_for(grader: str | None, manifest) -> str:
    """:func:`benchmark_grader` for a loaded dataset's manifest (None for a plain file): what every stage
    grades a dataset with."""
    declared = getattr(manifest, "grader", None)
    grading = getattr(manifest, "grading", None)
    return benchmark_grader(grader, declared, options_from_mapping(grading) if grading else None)
