"""Sentences of docs/results.md and docs/methods.md that restate numbers or readings, checked against the
tables and code they describe (so a table that changes without its sentence fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
RESULTS = (DOCS / "results.md").read_text(encoding="utf-8")
METHODS = (DOCS / "methods.md").read_text(encoding="utf-8")


def _row(text: str, label: str) -> list[str]:
    line = next(x for x in text.splitlines() if x.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n### ", start + 1)
    return text[start : end if end > 0 else None]


def test_strong_paec_relative_changes_follow_from_the_table():
    paec = _section(RESULTS, "### PAEC")
    grpo = [
        float(x)
        for x in re.search(r"GRPO's H̄ fell by ([\d.]+) %, ([\d.]+) % and\s+([\d.]+) %", paec).groups()
    ]
    strong = paec[paec.index("**Ten times stronger**") :]
    deltas = [float(x) for x in _row(strong, "H̄, relative change (first 10 → last 10 steps)")[-1].split(",")]
    signed = r"([−+]?[\d.]+)"
    found = re.search(rf"ends {signed} %, {signed} % and {signed} % from where it started", strong)
    stated = [float(x.replace("−", "-")) for x in found.groups()]
    assert stated == pytest.approx(
        [100 * (d - g / 100) for g, d in zip(grpo, deltas, strict=True)], abs=0.051
    )


def test_hard_window_density_claim_follows_from_the_table():
    aepo = _section(RESULTS, "### AEPO's hierarchical entropy reward")
    n_he, length = (
        _row(aepo, "hard bucket: N_HE per response"),
        _row(aepo, "hard bucket: response length (tokens)"),
    )
    g_n, a_n = (float(c.split(" ± ")[0]) for c in n_he[1:3])
    g_l, a_l = (float(c.split(" ± ")[0]) for c in length[1:3])
    stated = re.search(
        r"\(([\d.]+) / ([\d.]+) = ([\d.]+) under GRPO,\s+([\d.]+) / ([\d.]+) = ([\d.]+) with", aepo
    )
    assert [float(x) for x in stated.groups()[:2]] == [g_n, g_l]
    assert [float(x) for x in stated.groups()[3:5]] == [a_n, a_l]
    assert float(stated.group(3)) == pytest.approx(g_n / g_l, abs=5e-4)
    assert float(stated.group(6)) == pytest.approx(a_n / a_l, abs=5e-4)


def test_paec_long_is_summarised_with_its_late_window():
    assert "summarize_mechanisms.py build/studies/paec-long --late 76" in RESULTS
    assert "Steps 76–150 are\nthe late window" in RESULTS or "Steps 76–150 are the late window" in RESULTS


def test_recipe_defaults_say_where_they_come_from():
    table = RESULTS[RESULTS.index("| component | default (where it comes from) |") :].split("\n\n")[0]
    assert "paper default" not in RESULTS
    for line in table.splitlines()[2:]:
        component, default = (c.strip() for c in line.strip("|").split("|")[:2])
        if default != "—":
            assert re.search(r"\((paper|ours|the toy recipes'|PAEC app\. B|the paper's)", default), component


def test_methods_readings_are_named_as_readings():
    end_rule = next(x for x in METHODS.splitlines() if x.startswith("| end-of-response rule |"))
    assert "a reading" in end_rule
    assert "from both sides" not in METHODS
    aer = METHODS[METHODS.index("How AER differs from PAEC") :].split("\n\n")[0]
    assert "never pulls entropy down" in aer


def test_branching_token_split_adds_up():
    branching = _section(RESULTS, "### Entropy-triggered branching")
    delta = float(
        _row(branching, "generated tokens per step")[3].split(" ± ")[0].replace("+", "").replace(",", "")
    )
    extra, own, originals = (
        float(x)
        for x in re.search(
            r"the\s+extra (\d+) generated tokens are the branches' own (\d+) plus (\d+)", branching
        ).groups()
    )
    assert extra == delta and own + originals == pytest.approx(extra, abs=1)
