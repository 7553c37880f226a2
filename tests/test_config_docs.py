"""``docs/config.md`` is generated from the configs and must match them (regenerate, don't edit)."""

from __future__ import annotations

from pathlib import Path

from ares_cli.report.config_docs import render

DOC = Path(__file__).resolve().parents[1] / "docs" / "config.md"


def test_docs_config_md_is_up_to_date():
    assert DOC.read_text() == render(), (
        "docs/config.md is stale: run `.venv/bin/python -m ares_cli.report.config_docs > docs/config.md`"
    )


def test_every_stage_and_rl_section_is_documented():
    text = render()
    for heading in ("ares passrate", "ares eval", "ares curate", "ares sft", "ares rl"):
        assert f"## `{heading}`" in text
    for key in ("`aepo.window`", "`paec.top_p`", "`filter.mode`", "`epochs`", "`per_bracket`", "`benches`"):
        assert key in text
    assert "\\|shaping\\|" in text  # pipes inside a cell are escaped
