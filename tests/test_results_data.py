"""docs/results.md's tables against the stored data they come from (studies/results/), cell by cell."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "results.md"


def _renderer():
    spec = importlib.util.spec_from_file_location("render_results", REPO / "studies" / "render_results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


render = _renderer()


def test_every_marked_table_agrees_with_its_data():
    text = DOC.read_text(encoding="utf-8")
    assert len(render.marked_tables(text)) >= 2
    assert render.differences(text) == []


def test_every_stored_results_file_backs_a_table():
    sources = {t.source.split("#")[0] for t in render.marked_tables(DOC.read_text(encoding="utf-8"))}
    stored = {p.name for p in (REPO / "studies" / "results").iterdir() if p.suffix in (".md", ".json")}
    assert stored - {"README.md"} <= sources


@pytest.mark.parametrize("which", ["first", "last"])
def test_one_changed_cell_in_the_doc_is_named(which):
    text = DOC.read_text(encoding="utf-8")
    table = render.marked_tables(text)[0 if which == "first" else -1]
    lines = text.splitlines()
    row = table.start + 2  # the first data row
    cols = render.cells(lines[row])
    col = 1 if which == "first" else len(cols) - 1
    cols[col] = cols[col] + "0" if cols[col][-1].isdigit() else "9" + cols[col]
    lines[row] = "| " + " | ".join(cols) + " |"
    problems = render.differences("\n".join(lines))
    assert len(problems) == 1, problems
    assert f"line {row + 1}" in problems[0] and "the doc says" in problems[0]


def test_a_changed_value_in_the_data_is_caught(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(REPO / "studies" / "results", results)
    report = results / "demo-report.md"
    text = report.read_text(encoding="utf-8")
    first_row = render.tables_of(text)[1][2]
    cols = render.cells(first_row)
    cols[1] = "0.99 / 1"
    report.write_text(text.replace(first_row, "| " + " | ".join(cols) + " |"), encoding="utf-8")
    problems = render.differences(DOC.read_text(encoding="utf-8"), results)
    assert len(problems) == 1 and "the data '0.99 / 1'" in problems[0]


def test_emphasis_is_editorial_and_survives_a_rewrite():
    doc = (
        "x\n<!-- results: demo-report.md#2 -->\n" + "\n".join(render.render_source("demo-report.md#2")) + "\n"
    )
    lines = doc.splitlines()
    cols = render.cells(lines[4])  # the first data row (marker, header, separator above it)
    cols[2] = f"**{cols[2]}**"
    lines[4] = "| " + " | ".join(cols) + " |"
    bolded = "\n".join(lines) + "\n"
    assert render.differences(bolded) == []
    assert render.rewritten(bolded) == bolded


def test_a_marker_without_a_table_or_data_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="has no table"):
        render.marked_tables("<!-- results: demo-report.md#1 -->\n\ntext\n")
    problems = render.differences("<!-- results: absent.json#x -->\n| a |\n|---|\n| 1 |\n")
    assert problems and "no stored data" in problems[0]


def test_paired_table_renders_mean_se_and_per_seed_deltas():
    table = render.PairedTable("arm", "| q | GRPO | arm | Δ | per seed |", (render.Row("x", "x", 2),))
    summary = {"arm": {"x": {"arm": {"0": 3.0, "1": 5.0}, "grpo": {"0": 1.0, "1": 2.0}}}}
    # grpo mean 1.5, SE = sd/sqrt(2) = 0.7071/1.4142 = 0.5; arm 4 ± 1; deltas 2, 3 -> 2.5 ± 0.5
    assert table.render(summary)[2] == "| x | 1.50 ± 0.50 | 4.00 ± 1.00 | +2.50 ± 0.50 | +2.00, +3.00 |"


def test_a_changed_seed_in_the_study_summary_is_caught(tmp_path):
    """One seed's value of one quantity moves the arm's mean, the paired Δ and that seed's Δ: each is named."""
    results = tmp_path / "results"
    shutil.copytree(REPO / "studies" / "results", results)
    path = results / "mechanisms.json"
    summary = json.loads(path.read_text(encoding="utf-8"))
    summary["aepo_shaping"]["hard N_HE, steps 31–60"]["arm"]["2"] += 1.0
    path.write_text(json.dumps(summary), encoding="utf-8")
    problems = render.differences(DOC.read_text(encoding="utf-8"), results)
    named = {p.split("column ")[-1].split(":")[0] for p in problems}
    assert len(problems) == 3 and all("'hard bucket: N_HE per response'" in p for p in problems), problems
    assert named == {"'AEPO shaping'", "'paired Δ'", "'Δ per seed'"}, named


def test_aepo_kl_table_by_hand():
    """KL / δ: GRPO's mean ratio, then AEPO's mean ± SE of the per-seed ratios; κ_d's final values."""
    entry = {"delta": 0.01, "grpo": {"0": 0.02, "1": 0.04}, "arm": {"0": 0.01, "1": 0.03},
             "kappa_final": {"0": 0.1, "1": 0.3}}  # fmt: skip
    summary = {"aepo_kl": {d: entry for d in ("easy", "medium", "hard")}}
    # GRPO 0.03 ± 0.01 (sd 0.01414 / sqrt 2); ratios 2, 4 -> mean 3.00; AEPO ratios 1, 3 -> 2.00 ± 1.00
    row = render.render_source.__globals__["STUDY_TABLES"]["mechanisms.json"]["aepo_kl"](summary)[2]
    assert row == "| easy | 0.01 | 0.0300 ± 0.0100 | 0.0200 ± 0.0100 | 3.00 → 2.00 ± 1.00 | 0.200 ± 0.100 |"


def test_paec_scope_summary_and_table_by_hand():
    """Four RL steps whose gate was open on 0, 1/4, 0 and 1 of their optimiser steps: 31.25 % in all, at
    steps 2 and 4."""
    spec = importlib.util.spec_from_file_location("paec_scope", REPO / "studies" / "paec_scope.py")
    scope = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scope)
    rows = [
        {"step": s, "paec/penalty_active": a, "paec/h_low": 0.057}
        for s, a in ((1, 0), (2, 0.25), (3, 0), (4, 1))
    ]
    run = scope.summarize(rows)
    assert run == {
        "steps": 4,
        "optimiser_steps_gate_open": 0.3125,
        "rl_steps_gate_open": [2, 4],
        "h_low": 0.057,
    }
    table = render.render_source.__globals__["STUDY_TABLES"]["paec-scope.json"]["gate"](
        {"scopes": {"step": run}}
    )
    assert table[2] == "| `step` | 31.2 % | 2 of 4 (2, 4) | 0.0570 |"
