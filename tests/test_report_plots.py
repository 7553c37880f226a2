"""Plot families that the tiny pipeline does not produce: suites (Maj@K / Avg@K per benchmark), AER's entropy
against its target; and what a plot does with keys a run did not log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report_figures import _non_blank

from ares_cli.errors import InputError
from ares_cli.report.figure_helpers import Artifact, artifact_kind
from ares_cli.report.figures import plot_artifacts


def _suite(directory: Path, scale: float) -> Path:
    directory.mkdir(parents=True)
    columns = [{"name": f"{b} {m}@8", "bench": b, "metric": m.lower(), "k": 8, "value": v * scale, "se": 0.03}
               for b, (maj, avg) in {"AIME24": (0.3, 0.25), "MATH500": (0.8, 0.7)}.items()
               for m, v in (("Maj", maj), ("Avg", avg))]  # fmt: skip
    columns.append({"name": "Average", "bench": None, "metric": "headline", "value": 0.5 * scale, "se": 0.02})
    (directory / "results.json").write_text(json.dumps({"suite": "paec-math", "columns": columns}))
    return directory


def test_suite_bars(tmp_path):
    a, b = _suite(tmp_path / "a", 1.0), _suite(tmp_path / "b", 0.8)
    assert artifact_kind(a) == "suite"
    paths = plot_artifacts([Artifact("base", "suite", b), Artifact("paec", "suite", a)], tmp_path / "out")
    assert [p.name for p in paths] == ["suite-paec-math.png", "suite-paec-math.svg"]
    _non_blank(paths[0])
    assert "AIME24 Maj@8" in paths[1].read_text()


def test_aer_figure_from_logged_keys(tmp_path):
    run = tmp_path / "rl-aer"
    run.mkdir()
    rows = [{"step": s, "reward": 0.1 * s, "accuracy": 0.1 * s, "entropy": 0.5 - 0.02 * s, "response_len": 50 + s,
             "aer/entropy": 0.5 - 0.02 * s, "aer/target": 0.4, "aer/alpha": 0.01 * s, "aer/hard_frac": 0.3}
            for s in range(1, 11)]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    paths = plot_artifacts([Artifact("aer", artifact_kind(run), run)], tmp_path / "out")
    assert {p.name for p in paths} == {f"aer-{f}.{x}" for f in ("training", "aer") for x in ("png", "svg")}
    svg = (tmp_path / "out" / "aer-aer.svg").read_text()
    assert "aer/target" in svg and "aer/alpha" in svg and "aer/hard_frac" in svg
    for path in paths:
        if path.suffix == ".png":
            _non_blank(path)


def test_bad_metrics_row_names_file_and_line(tmp_path):
    run = tmp_path / "rl-bad"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "rew\n')
    with pytest.raises(InputError, match=r"metrics.jsonl.*row 2"):
        plot_artifacts([Artifact("bad", "rl", run)], tmp_path / "out")


def test_unknown_directory_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no manifest.json"):
        artifact_kind(tmp_path)


def test_eval_figure_and_a_tampered_artifact(tmp_path):
    from test_eval_stage import _write
    from typer.testing import CliRunner

    from ares_cli.main import app
    from ares_cli.stages.evaluate import EvalConfig, run_eval
    from ares_cli.store.artifacts import ArtifactStore

    problems, samples = _write(tmp_path)
    run, _ = run_eval(ArtifactStore(tmp_path / "art"), model=None, cfg=EvalConfig(grade_workers=1),
                      data=str(problems), from_samples=str(samples), log=lambda m: None)  # fmt: skip
    args = ["--artifacts-root", str(tmp_path / "art"), "report", "plot", f"m={run.artifact_id}", "--out"]
    ok = CliRunner().invoke(app, [*args, str(tmp_path / "figs")])
    assert ok.exit_code == 0, ok.output
    _non_blank(tmp_path / "figs" / "m-problems.png")
    results = run.final_dir / "results.json"
    results.write_text(results.read_text().replace('"k": 5', '"k": 6'))
    tampered = CliRunner().invoke(app, [*args, str(tmp_path / "figs2")])
    assert tampered.exit_code == 4 and "results.json" in tampered.output
