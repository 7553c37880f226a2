"""`ares report compare`: ranks, Spearman, per-problem accuracy and the paired difference, by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import run_ares

from ares_cli.errors import InputError, UsageError
from ares_cli.report.compare import (
    average_ranks,
    comparison,
    markdown,
    paired_difference,
    problem_accuracy,
    spearman,
)


def test_average_ranks_share_ties():
    assert average_ranks([10, 30, 20, 30]) == [1.0, 3.5, 2.0, 3.5]


def test_spearman_by_hand():
    # x ranks 1 2 3 4, y ranks 1 3 2 4: d^2 = 0+1+1+0 = 2, rho = 1 - 6*2/(4*15) = 0.8
    assert spearman([1, 2, 3, 4], [5, 9, 7, 11]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 2, 3], [4, 4, 4]))


def _samples(grades: dict[str, str]) -> list[dict]:
    """``{"p1": "cci"}`` -> one sample row per letter (c = correct, i = incorrect)."""
    return [
        {
            "problem_id": pid,
            "sample_idx": i,
            "grade": "correct" if g == "c" else "incorrect",
            "n_tokens": 10 + i,
        }
        for pid, letters in grades.items()
        for i, g in enumerate(letters)
    ]


def test_problem_accuracy_and_paired_difference_by_hand():
    base = problem_accuracy(_samples({"a": "ciii", "b": "ccii", "c": "iiii", "x": "cccc"}))
    assert base == {"a": 0.25, "b": 0.5, "c": 0.0, "x": 1.0}
    model = problem_accuracy(_samples({"a": "ccii", "b": "ccci", "c": "iiii"}))
    # shared a, b, c: diffs 0.25, 0.25, 0.0 -> mean 1/6; sample sd = sqrt(((1/12)^2*2 + (1/6)^2)/2) = 0.1443
    diff = paired_difference(model, base)
    assert diff["n"] == 3 and diff["delta"] == pytest.approx(1 / 6)
    assert diff["se"] == pytest.approx(math.sqrt(((1 / 12) ** 2 * 2 + (1 / 6) ** 2) / 2) / math.sqrt(3))
    with pytest.raises(InputError, match="share no problem"):
        paired_difference({"z": 1.0}, base)


def _eval_dir(root: Path, grades: dict[str, str]) -> Path:
    """A minimal eval artifact directory (results.json, problems/, samples/) for bench 'toy'."""
    (root / "problems").mkdir(parents=True)
    (root / "samples").mkdir()
    samples = _samples(grades)
    acc = problem_accuracy(samples)
    problems = [{"id": pid, "meta": {"difficulty": d}} for d, pid in enumerate(grades, start=1)]
    by_difficulty = {
        str(p["meta"]["difficulty"]): {"avg@4": acc[p["id"]], "len_mean": 11.5} for p in problems
    }
    results = {"toy": {"overall": {"k": 4, "avg@4": sum(acc.values()) / len(acc), "len_mean": 11.5},
                       "by_difficulty": by_difficulty}}  # fmt: skip
    (root / "results.json").write_text(json.dumps(results))
    (root / "problems" / "toy.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    (root / "samples" / "toy.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return root


def test_comparison_with_a_baseline(tmp_path):
    base = _eval_dir(tmp_path / "base", {"a": "ciii", "b": "ccii", "c": "iiii"})
    model = _eval_dir(tmp_path / "model", {"a": "ccii", "b": "ccci", "c": "iiii"})
    table = comparison({"base": base, "rl": model}, baseline="base")
    assert table["models"]["base"]["vs_baseline"]["delta"] == 0.0
    assert table["models"]["rl"]["vs_baseline"]["delta"] == pytest.approx(1 / 6)
    text = markdown(table)
    assert "Δ vs base (± SE)" in text and "+0.167 ± 0.083" in text
    with pytest.raises(UsageError, match="baseline 'grpo'"):
        comparison({"base": base}, baseline="grpo")


def test_report_compare_cli_baseline(tmp_path):
    base = _eval_dir(tmp_path / "base", {"a": "ciii", "b": "ccii", "c": "iiii"})
    model = _eval_dir(tmp_path / "model", {"a": "ccii", "b": "ccci", "c": "iiii"})
    out = run_ares("--json", "report", "compare", f"base={base}", f"rl={model}", "--baseline", "base",
                   process=False, root=tmp_path / "art")  # fmt: skip
    table = json.loads(out.stdout)
    assert table["baseline"] == "base"
    assert table["models"]["rl"]["vs_baseline"]["n"] == 3
    bad = run_ares(
        "report",
        "compare",
        f"base={base}",
        "--baseline",
        "nope",
        process=False,
        root=tmp_path / "art",
        check=False,
    )
    assert bad.returncode == 2 and "baseline 'nope'" in bad.stderr


def _compare(tmp_path, *args):
    from typer.testing import CliRunner

    from ares_cli.main import app

    return CliRunner().invoke(app, ["--artifacts-root", str(tmp_path / "art"), "report", "compare", *args])


def test_compare_refuses_a_duplicate_label_and_a_missing_markdown_directory(tmp_path):
    one = _eval_dir(tmp_path / "one", {"a": "ciii", "b": "ccii"})
    two = _eval_dir(tmp_path / "two", {"a": "cccc", "b": "ccii"})
    dup = _compare(tmp_path, f"a={one}", f"a={two}")
    assert dup.exit_code == 2 and "label 'a' is given twice" in dup.output
    missing = _compare(tmp_path, f"a={one}", f"b={two}", "--markdown", "/nonexistent/x.md")
    assert missing.exit_code == 2 and "directory /nonexistent does not exist" in " ".join(
        missing.output.split()
    )


def test_compare_warns_on_different_problem_sets_and_refuses_different_benchmarks(tmp_path):
    full = _eval_dir(tmp_path / "full", {"a": "ciii", "b": "ccii", "c": "iiii"})
    part = _eval_dir(tmp_path / "part", {"a": "cccc", "b": "ccii"})
    table = comparison({"full": full, "part": part}, baseline="full")
    assert table["warnings"] == [
        "part was evaluated on 2 problems and full on 3 (2 shared): accuracies over different problem sets "
        "are not comparable"
    ]
    assert comparison({"x": full, "y": full})["warnings"] == []
    cli = _compare(tmp_path, f"full={full}", f"part={part}")
    assert cli.exit_code == 0 and "warning: part was evaluated on 2 problems" in " ".join(cli.output.split())
    other = _eval_dir(tmp_path / "other", {"a": "cccc"})
    results = json.loads((other / "results.json").read_text())
    (other / "results.json").write_text(json.dumps({"aime": results["toy"]}))
    for sub in ("problems", "samples"):
        (other / sub / "toy.jsonl").rename(other / sub / "aime.jsonl")
    with pytest.raises(UsageError, match=r"different benchmarks \(full=toy, other=aime\)"):
        comparison({"full": full, "other": other})
