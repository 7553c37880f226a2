"""``ares data check`` warnings about golds a grader cannot read (the rows stay valid; exit 0).

- **control characters** (not newlines): JSON escapes that ate a LaTeX command, ``\\f``\\ rac as a form
  feed + ``rac``, ``\\t``\\ ext as a tab + ``ext``; the math grader reads them back as the command, other
  graders may not;
- **empty golds**: nothing left once delimiters, ``\\text{}`` wrappers and spacing are removed (``$ $``);
- **golds that fail self-grading**: each gold, boxed, graded against itself by the dataset's grader in
  its worker pool must be correct. For ``math`` this parses the gold (no plain-text shortcut), so an
  unparseable gold shows up here rather than as ``error`` grades in a run.
"""

from __future__ import annotations

from collections.abc import Sequence

from ares_cli.errors import InputError
from ares_cli.grading.answer_forms import control_characters, plain_text, repair_escapes, strip_delimiters


def _self_grade_spec(grader: str, trust_code: bool = False):
    """The worker grader a gold is checked with: the rules of a judge grader; ``math`` without shortcut
    (``trust_code``: a module path is allowed, the user's ``--trust-grader-code``)."""
    from ares_cli.grading.judge import parse_judge_grader, rules_spec
    from ares_cli.grading.registry import resolve_grader

    judged = parse_judge_grader(grader)
    spec = rules_spec(judged) if judged else resolve_grader(grader, trust_code=trust_code)
    if spec.target.startswith("ares_cli.grading.math_grader:"):
        return spec.retarget("math_verify/self", "ares_cli.grading.math_grader:gold_self_grade")
    return spec


def gold_warnings(
    records: Sequence[dict],
    locations: Sequence[tuple[str, int]],
    *,
    grader: str = "math_verify",
    self_grade: bool = True,
    workers: int = 2,
    timeout_s: float = 10.0,
    trust_code: bool = False,
) -> list[dict]:
    """One warning per problem and kind: ``{id, file, row, field, kind, detail}``."""
    where = list(locations) + [("", 0)] * (len(records) - len(locations))

    def warning(i: int, kind: str, detail: str) -> dict:
        file, row = where[i]
        return {
            "id": records[i]["id"],
            "file": file,
            "row": row,
            "field": "answer",
            "kind": kind,
            "detail": detail,
        }

    out = []
    for i, r in enumerate(records):
        answer = r["answer"]
        if chars := control_characters(answer):
            repaired = repair_escapes(answer)
            detail = f"{', '.join(chars)} in {answer!r}" + (
                f" (read as {repaired!r})" if repaired != answer else ""
            )
            out.append(warning(i, "control characters", detail))
        if not plain_text(strip_delimiters(repair_escapes(answer))):
            out.append(warning(i, "empty gold", f"nothing to grade in {answer!r}"))
    if self_grade and records:
        from ares_cli.grading import GradingPool

        spec = _self_grade_spec(grader, trust_code)
        copy = repair_escapes if ":gold_self_grade" in spec.target else str  # a boxed answer is stripped
        with GradingPool(spec, workers=workers, timeout_s=timeout_s) as pool:
            golds = [pool.gold_for(r) for r in records]
            answers = [f"\\boxed{{{copy(r['answer'])}}}" for r in records]
            results = pool.grade(list(zip(golds, answers, strict=True)))
            label = pool.grader
        for i, res in enumerate(results):
            if res.grade != "correct":
                detail = f"graded {res.grade} by {label}" + (f": {res.detail}" if res.detail else "")
                out.append(warning(i, "gold not graded correct against itself", detail))
    return out


def check_choice_golds(
    problems: list[dict], grader: str, source: str, trust_code: bool = False, locations=None
) -> None:
    """A choice grader needs every gold to name an option: report each one that does not (exit 3), by its
    file and row when ``locations`` (one ``(file, row)`` per problem) are known. Every sampling stage
    calls it when its data loads (eval, passrate, rl), so a bad gold never becomes a 'hard' problem."""
    from ares_cli.grading import resolve_grader
    from ares_cli.grading.judge import parse_judge_grader

    spec = None if parse_judge_grader(grader) else resolve_grader(grader, trust_code=trust_code)
    if spec is None or not spec.with_options:
        return
    from ares_cli.errors import InputErrors
    from ares_cli.grading.choice import gold_problem

    per_row, grading = spec.name == "choice_or_math", spec.grading_options()
    errors = []
    for i, p in enumerate(problems):
        file, row = locations[i] if locations is not None else (source, None)
        options = (p.get("meta") or {}).get("options")
        if (problem := gold_problem(p["answer"], options, per_row=per_row, grading=grading)) is not None:
            errors.append(InputError(f"problem {p['id']}: {problem}", file=file, row=row, field="answer"))
    if errors:
        raise InputErrors(errors)
