"""The figure families without a pipeline: a passrate artifact's histogram (the shared toy store) and an RL
run's training, AEPO, PAEC and AER panels and the runs-compared overlay, drawn from metric rows written
here. Each figure is a non-blank PNG beside its SVG. (tests/test_report_figures.py, in the slow tier, draws
the same families from a whole `make` pipeline and checks the report page.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ares_cli.report.figure_helpers import Artifact
from ares_cli.report.plot_passrate import plot_passrate
from ares_cli.report.plot_rl import plot_run, plot_runs_compared

BUCKETS = ("easy", "medium", "hard")


def _metric_rows(steps: int = 6) -> list[dict]:
    """Rows as an AEPO / PAEC / AER run logs them (one per step), with an empty bucket and a gap."""
    rows = []
    for s in range(1, steps + 1):
        row = {"step": s, "accuracy": 0.2 + 0.01 * s, "reward": 0.1 * s, "response_len": 80.0 + s,
               "entropy": 0.09 - 0.002 * s, "aepo/threshold": 1.2, "aepo/threshold_batch": 1.1 + 0.01 * s,
               "paec/h_bar": 0.07 - 0.003 * s, "paec/h0": 0.07, "paec/h_low": 0.056,
               "paec/penalty": max(0.0, 0.056 - (0.07 - 0.003 * s)), "paec/penalty_active": float(s >= 5),
               "aer/alpha": 0.01 * s, "aer/target": 0.085, "aer/hard_frac": 0.3}  # fmt: skip
        for i, b in enumerate(BUCKETS):
            row |= {f"aepo/{b}/size": 0 if (b == "medium" and s == 3) else 8, f"aepo/{b}/n_he": 0.5 * i + 0.1 * s,
                    f"aepo/{b}/target": float(i), f"aepo/{b}/lambda": 0.1 * i, f"aepo/{b}/kappa": 0.01 * (i + s),
                    f"aepo/{b}/kl_nonwindow": 0.001 * (i + 1) * s, f"aepo/{b}/response_len": 40.0 * (i + 1)}  # fmt: skip
        if s % 3 == 0:
            row |= {"val/accuracy": 0.3, "val/response_len": 85.0}
        rows.append(row)
    return rows


def _rl_artifact(directory: Path, label: str, rows: list[dict]) -> Artifact:
    directory.mkdir(parents=True)
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return Artifact(label=label, kind="rl", path=directory)


def _assert_drawn(paths: list[Path], stem: str) -> None:
    from PIL import Image

    names = {p.name for p in paths}
    assert {f"{stem}.png", f"{stem}.svg"} <= names, names
    png = next(p for p in paths if p.name == f"{stem}.png")
    with Image.open(png) as image:
        low, high = image.convert("L").getextrema()
    assert high - low > 100, f"{png.name} is blank"
    assert "<svg" in next(p for p in paths if p.name == f"{stem}.svg").read_text(encoding="utf-8")[:400]


def test_an_rl_run_draws_its_training_and_every_method_panel(tmp_path):
    art = _rl_artifact(tmp_path / "run", "aepo-run", _metric_rows())
    written = plot_run(art, tmp_path / "figures")
    for family in ("training", "aepo", "paec", "aer"):
        _assert_drawn(written, f"aepo-run-{family}")


def test_a_grpo_run_draws_only_its_training_panels(tmp_path):
    rows = [{k: v for k, v in r.items() if "/" not in k or k.startswith("val/")} for r in _metric_rows()]
    written = plot_run(_rl_artifact(tmp_path / "run", "grpo", rows), tmp_path / "figures")
    assert sorted(p.name for p in written) == ["grpo-training.png", "grpo-training.svg"]


def test_runs_compared_overlays_every_run(tmp_path):
    arts = [_rl_artifact(tmp_path / f"r{i}", f"run{i}", _metric_rows(4 + i)) for i in range(3)]
    _assert_drawn(plot_runs_compared(arts, tmp_path / "figures"), "rl-compared")


def test_a_passrate_artifact_draws_its_histogram_and_buckets(toy_store, tmp_path):
    root, ids = toy_store
    art = Artifact(label="toy-base", kind="passrate", path=root / "passrate" / ids["passrate"])
    _assert_drawn(plot_passrate(art, tmp_path / "figures"), "toy-base-passrate")


def test_the_report_page_of_the_toy_stores_artifacts_holds_every_figure_and_each_models_lineage(
    toy_store, tmp_path
):
    """`ares report html` on artifact ids (no pipeline state): the base model's lineage tree, the passrate,
    curate and eval figures inline, and the figures beside the page."""
    from conftest import run_ares

    root, ids = toy_store
    page = tmp_path / "page" / "report.html"
    targets = [ids[s] for s in ("toy-init", "passrate", "curate", "eval")]
    out = json.loads(
        run_ares("--json", "report", "html", *targets, "--out", str(page), root=root, process=False).stdout
    )
    text = page.read_text(encoding="utf-8")
    assert out["path"] == str(page) and '<ul class="lineage">' in text and ids["toy-init"] in text
    pngs = sorted(Path(p).name for p in out["figures"] if p.endswith(".png"))
    assert any(n.endswith("-passrate.png") for n in pngs) and any("length_vs_passrate" in n for n in pngs), (
        pngs
    )
    assert text.count("data:image/png;base64,") == len(pngs) and "No figures." not in text


def test_a_cold_start_run_draws_its_sft_panels(tmp_path):
    rows = [
        {"step": s, "loss": 1.0 / s, "lr": 1e-4 * s, "grad_norm": 0.5, "tokens_per_s": 900.0 + s}
        for s in range(1, 6)
    ]
    art = _rl_artifact(tmp_path / "sft", "cold-start", rows)
    written = plot_run(Artifact(label=art.label, kind="sft", path=art.path), tmp_path / "figures")
    _assert_drawn(written, "cold-start-sft")
    assert len(written) == 2


def test_report_pipeline_and_html_read_a_state_directory(toy_store, tmp_path):
    """`ares report pipeline STATE` and `ares report html STATE` on a state written here (the pipeline's copy
    and each stage's `.id` file naming its artifact, as a rendered pipeline leaves them)."""
    from conftest import run_ares

    root, ids = toy_store
    state = tmp_path / "state"
    state.mkdir()
    (state / "pipeline.yaml").write_text(
        "name: mini\nstages:\n  base: {run: toy init}\n"
        '  passrate: {run: passrate, args: {model: "@base", data: toy-train}}\n'
        '  curate: {run: curate, args: {passrate: "@passrate"}}\n'
        '  eval_base: {run: eval, args: {model: "@base", bench: toy-test}}\n'
        "report: {compare: {base: eval_base}}\n",
        encoding="utf-8",
    )
    for name, stage, kind in (("base", "toy-init", "toy-init"), ("passrate", "passrate", "passrate"),
                              ("curate", "curate", "curate"), ("eval_base", "eval", "eval")):  # fmt: skip
        (state / f"{name}.id").write_text(str(root / kind / ids[stage]) + "\n", encoding="utf-8")
    text = json.loads(run_ares("--json", "report", "pipeline", str(state), root=root, process=False).stdout)
    assert all(f"| {name} |" in text["markdown"] for name in ("base", "passrate", "curate", "eval_base")), (
        text
    )
    out = json.loads(run_ares("--json", "report", "html", str(state), root=root, process=False).stdout)
    assert out["path"] == str(state / "report.html") and (state / "report.html").is_file()


def test_an_artifact_of_a_stage_without_figures_is_an_input_error_naming_its_manifest(tmp_path):
    from ares_cli.errors import InputError
    from ares_cli.report.figure_helpers import artifact_kind

    (tmp_path / "manifest.json").write_text(json.dumps({"stage": "toy-twin"}), encoding="utf-8")
    with pytest.raises(InputError, match="no figures for stage 'toy-twin'") as err:
        artifact_kind(tmp_path)
    assert "manifest.json" in str(err.value)


def test_two_rl_runs_among_the_artifacts_get_the_comparison_figure(tmp_path):
    from ares_cli.report.figures import plot_artifacts

    arts = [_rl_artifact(tmp_path / f"r{i}", f"run{i}", _metric_rows()) for i in range(2)]
    names = {p.name for p in plot_artifacts(arts, tmp_path / "figures")}
    assert {"run0-training.png", "run1-training.png", "rl-compared.png"} <= names, names


def test_a_lineage_input_that_is_a_plain_file_is_named_by_its_file():
    from ares_cli.report.html import _tree

    item = _tree({"path": "/data/problems.jsonl", "role": "data", "sha256": "ab" * 32})
    assert (
        item
        == '<li><span class="role">data:</span> <code>problems.jsonl</code> <span class="sha">abababababab</span></li>'
    )
