"""Reports over hostile labels and paths, through the CLI: `report plot`, `report html`, `report compare`.

Math datasets put LaTeX everywhere, so labels with ``$`` are drawn as text, not parsed as mathtext; string
difficulties (``Easy`` / ``Medium`` / ``Hard``) are ordered, unknown categories kept in first-seen order;
a source named ``_x`` stays in the legend; output paths are checked before any figure is drawn; bad labels
are one kind of error (exit 2); tables in a log are printed at full width.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ares_cli.main import app

pytest.importorskip("matplotlib")

LABELS = [("$\\frac{$", "$x^$"), ("Easy", "_hidden"), ("Hard", "$x^$"), ("Medium", "ok"), ("chart", "ok")]


def _invoke(root: Path, *argv: str):
    result = CliRunner().invoke(app, ["--artifacts-root", str(root), *argv])
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    return result.exit_code, " ".join(result.output.split()), result


def _eval(tmp: Path, labels: list[tuple[object, str]]) -> tuple[Path, Path]:
    """An eval over one problem per (difficulty, source), graded from fixed samples (no model)."""
    problems, samples = tmp / "labels.jsonl", tmp / "samples.jsonl"
    problems.write_text("".join(
        json.dumps({"id": f"p{i}", "source": src, "problem": "1+1?", "answer": "2", "meta": {"difficulty": d}})
        + "\n" for i, (d, src) in enumerate(labels)
    ))  # fmt: skip
    samples.write_text("".join(
        json.dumps({"problem_id": f"p{i}", "sample_idx": j, "response": f"\\boxed{{{2 + (i + j) % 2}}}",
                    "n_tokens": 3 + i}) + "\n" for i in range(len(labels)) for j in range(2)
    ))  # fmt: skip
    root = tmp / "artifacts"
    code, text, _ = _invoke(root, "eval", "--data", str(problems), "--from-samples", str(samples),
                            "--grader", "boxed_int", "--set", "grade_workers=1")  # fmt: skip
    assert code == 0, text
    return root, next((root / "eval").glob("eval-*"))


@pytest.fixture(scope="module")
def labelled_eval(tmp_path_factory) -> tuple[Path, Path]:
    """Difficulties and sources that are LaTeX fragments, known names, a category and '_hidden'."""
    return _eval(tmp_path_factory.mktemp("labels"), LABELS)


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "plot", "{eval}", "$x^$={eval}", "--out", "{tmp}/figures"],
        ["report", "html", "{eval}", "--out", "{tmp}/page/report.html"],
        ["report", "compare", "$\\frac{{$={eval}", "_m={eval}"],
    ],
    ids=["plot", "html", "compare"],
)
def test_latex_labels_and_string_difficulties_are_drawn_as_text(labelled_eval, tmp_path, argv):
    root, artifact = labelled_eval
    code, text, _ = _invoke(root, *[a.format(eval=artifact, tmp=tmp_path) for a in argv])
    assert code == 0, text
    assert "ParseSyntaxException" not in text and "could not convert" not in text


def test_levels_put_numbers_then_known_names_then_the_rest_in_first_seen_order():
    from ares_cli.report.levels import level_order, level_ranks

    assert level_order(["Hard", "2", "zeta", "easy", "10", "Medium", "alpha", 1]) == [
        "1", "2", "10", "easy", "Medium", "Hard", "zeta", "alpha"
    ]  # fmt: skip
    assert level_ranks(["Hard", "Easy", "Medium", 1]) == {"1": 1.0, "Easy": 3.0, "Medium": 4.0, "Hard": 5.0}
    assert level_ranks(["Easy", "chart"]) is None  # a category has no rank: no correlation, no crash


def test_compare_orders_string_difficulties(labelled_eval):
    root, artifact = labelled_eval
    code, text, result = _invoke(root, "--json", "report", "compare", f"a={artifact}")
    assert code == 0, text
    table = json.loads(result.stdout)
    assert table["levels"] == ["Easy", "Medium", "Hard", "$\\frac{$", "chart"]
    assert table["models"]["a"]["spearman_len_difficulty"] != table["models"]["a"]["spearman_len_difficulty"]


def test_a_label_that_starts_with_an_underscore_stays_in_the_legend(labelled_eval, tmp_path, monkeypatch):
    """matplotlib drops legend labels that start with '_': a model or source named so is still shown."""
    from ares_cli.report import plot_eval
    from ares_cli.report.figure_helpers import resolve
    from ares_cli.report.figures import plot_artifacts
    from ares_cli.store.artifacts import ArtifactStore

    root, artifact = labelled_eval
    drawn = []
    monkeypatch.setattr(plot_eval, "save", lambda fig, out_dir, stem: drawn.append(fig) or [])
    plot_artifacts(resolve(ArtifactStore(root), [f"_x={artifact}", f"y={artifact}"]), tmp_path)
    legends = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in drawn[0].axes if ax.get_legend()]
    assert legends and all(len(entries) == 2 and entries[0].endswith("_x") for entries in legends), legends


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["report", "plot", "{eval}", "--out", "{file}"], "--out {file} is a file; a directory is needed"),
        (
            ["report", "plot", "{eval}", "--out", "{file}/sub"],
            "cannot create the directory (Not a directory)",
        ),
        (
            ["report", "html", "{eval}", "--out", "{tmp}"],
            "--out {tmp} is a directory; give the file to write",
        ),
        (
            ["report", "html", "{eval}", "--out", "{file}/page.html"],
            "its directory {file} is a file; a directory",
        ),
    ],
    ids=["plot-out-file", "plot-out-under-a-file", "html-out-dir", "html-out-under-a-file"],
)
def test_output_paths_are_checked_before_any_figure(labelled_eval, tmp_path, argv, fragment):
    root, artifact = labelled_eval
    file = tmp_path / "existing.txt"
    file.write_text("keep\n")
    fmt = {"eval": artifact, "tmp": tmp_path, "file": file}
    code, text, _ = _invoke(root, *[a.format(**fmt) for a in argv])
    assert code == 2, text
    assert fragment.format(**fmt) in text
    assert file.read_text() == "keep\n"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["report", "compare", "{eval}"], "expected LABEL=EVAL_ARTIFACT"),
        (["report", "compare", "a={eval}", "a={eval}"], "label 'a' is given twice"),
        (["report", "compare", "a={eval}", "--baseline", "b"], "--baseline 'b' is not one of the labels: a"),
    ],
    ids=["no-equals", "twice", "unknown-baseline"],
)
def test_every_bad_label_is_a_usage_error(labelled_eval, argv, fragment):
    root, artifact = labelled_eval
    code, text, _ = _invoke(root, *[a.format(eval=artifact) for a in argv])
    assert code == 2, text
    assert fragment in text


@pytest.fixture()
def eight_levels(tmp_path) -> tuple[Path, Path]:
    return _eval(tmp_path, [(d, "toy") for d in range(1, 9)])


def test_tables_in_a_log_are_printed_at_full_width(eight_levels):
    """stderr to a file (make demo | tee, cron): no 80-column squeeze, no cells cut to '0.…'."""
    root, artifact = eight_levels
    label = "a-model-label-that-is-much-longer-than-a-terminal-column-" * 2
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-c", "from ares_cli.main import main; main()", "--artifacts-root", str(root),
         "report", "compare", f"{label}={artifact}"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    row = next(line for line in proc.stderr.splitlines() if label in line)
    assert "…" not in proc.stderr and row.count("/") >= 6  # every cell: accuracy/length, whole
