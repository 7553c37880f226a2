"""docs/performance.md's benchmark tables against the stored benchmark JSON (studies/results/bench/), cell by cell."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "performance.md"
BENCH = REPO / "studies" / "results" / "bench"


def _renderer():
    spec = importlib.util.spec_from_file_location("render_results", REPO / "studies" / "render_results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


render = _renderer()
TABLES = render.marked_tables(DOC.read_text(encoding="utf-8"))


def test_every_marked_benchmark_table_agrees_with_its_data():
    assert len(TABLES) >= 4
    assert render.differences(DOC.read_text(encoding="utf-8"), doc_name="docs/performance.md") == []


def test_every_stored_benchmark_file_backs_a_table_and_is_listed_with_its_command():
    sources = {t.source.split("#")[0] for t in TABLES}
    stored = {f"bench/{p.name}" for p in BENCH.glob("*.json")}
    assert stored and stored <= sources
    readme = (REPO / "studies" / "results" / "README.md").read_text(encoding="utf-8")
    for name in stored:
        row = next((line for line in readme.splitlines() if f"`{name}`" in line), "")
        assert "benchmarks/bench_" in row, f"README row for {name} names no regenerate command"


@pytest.mark.parametrize("index", range(len(TABLES)), ids=[t.source for t in TABLES])
def test_one_changed_cell_of_each_table_is_named(index):
    text = DOC.read_text(encoding="utf-8")
    table = TABLES[index]
    lines = text.splitlines()
    row = table.start + 2 + index % (len(table.lines) - 2)  # a different data row in different tables
    cols = render.cells(lines[row])
    col = len(cols) - 1 - index % (len(cols) - 1)
    cols[col] = "9" + cols[col]
    lines[row] = "| " + " | ".join(cols) + " |"
    problems = render.differences("\n".join(lines), doc_name="docs/performance.md")
    assert len(problems) == 1, problems
    assert f"docs/performance.md line {row + 1} ({table.source})" in problems[0]
    assert f"the doc says '9{render.plain(render.cells(text.splitlines()[row])[col])}'" in problems[0]


def test_a_changed_value_in_the_stored_json_is_caught(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "studies" / "results", results)
    path = results / "bench" / "memory.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    report["results"][0]["fused_peak_extra_mib"] = 12345.6
    path.write_text(json.dumps(report), encoding="utf-8")
    problems = render.differences(DOC.read_text(encoding="utf-8"), results)
    assert len(problems) == 1 and "the data '12,345.6'" in problems[0], problems


def test_a_dropped_row_in_the_stored_json_is_caught(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "studies" / "results", results)
    path = results / "bench" / "token_stats.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    report["results"] = [r for r in report["results"] if r["logits"] != "flat"]
    path.write_text(json.dumps(report), encoding="utf-8")
    problems = render.differences(DOC.read_text(encoding="utf-8"), results)
    assert any("no result for vocab" in p and "flat" in p for p in problems), problems


def test_memory_table_renders_a_skipped_size_by_its_estimate():
    report = {"results": [{"response_tokens": 8192, "fused_peak_extra_mib": 166.8, "logits_fp32_mib": 4752.0,
                           "logits_skipped": "needs ~13.9 GiB > limit 8.9 GiB"}]}  # fmt: skip
    assert render.render_source.__globals__["STUDY_TABLES"]["bench/memory.json"]["table"](report)[2] == (
        "| 8,192 | 166.8 | skipped (needs ~13.9 GiB) | 4,752 |"
    )


def test_a_marker_outside_the_results_folder_is_refused():
    problems = render.differences("<!-- results: bench/../../x.json#table -->\n| a |\n|---|\n| 1 |\n")
    assert problems and "without '..'" in problems[0]


def test_the_command_checks_both_docs_and_fails_on_a_changed_cell(tmp_path, capsys):
    assert render.main(["--check"]) == 0
    out = capsys.readouterr().out
    assert "results.md" in out and "performance.md" in out
    text = DOC.read_text(encoding="utf-8").splitlines()
    row = TABLES[0].start + 2
    cols = render.cells(text[row])
    cols[0] = "9" + cols[0]
    text[row] = "| " + " | ".join(cols) + " |"
    changed = tmp_path / "performance.md"
    changed.write_text("\n".join(text) + "\n", encoding="utf-8")
    assert render.main(["--check", "--doc", str(changed)]) == 1
    assert f"line {row + 1}" in capsys.readouterr().err
