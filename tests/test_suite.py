"""Evaluation suites: the shipped suite files, the table (pure), and `ares eval --suite toy` end to end
(suite artifact, an "up to date" rerun that reuses every benchmark eval, and `report compare` of suites)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import run_ares

from ares_cli.data.manifests import list_manifests
from ares_cli.errors import InputErrors
from ares_cli.stages.suite import Suite, SuiteBench, load_suite, markdown, suite_dir, suite_table

SHIPPED = ["ares-mm", "ares-text", "paec-math", "rehearse-ares", "rehearse-paec", "toy"]


def test_shipped_suites_parse_and_name_known_manifests():
    assert sorted(p.stem for p in suite_dir().glob("*.yaml")) == SHIPPED
    known = set(list_manifests())
    for name in SHIPPED:
        suite = load_suite(name)
        assert {b.bench for b in suite.benches} <= known
    paec = load_suite("paec-math")
    assert [(b.label, b.k) for b in paec.benches] == [
        ("AIME24", 32), ("AIME25", 32), ("AIME26", 32), ("MATH500", 8), ("AMC23", 16)
    ]  # fmt: skip
    assert all(b.metrics == ("maj", "avg") for b in paec.benches) and paec.average == ("maj", "avg")
    text = load_suite("ares-text")
    assert {b.label: b.metrics for b in text.benches}["AIME24"] == ("avg",) and text.benches[0].k == 16
    assert all(b.metrics == ("pass@1",) for b in text.benches[2:])
    mm = {b.label: b.metrics for b in load_suite("ares-mm").benches}
    assert mm["DynaMath-W"] == ("aggregate",) and mm["WeMath-S"] == ("aggregate",)


def test_bad_suite_names_file_and_fields(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: other\nbenches:\n  - {bench: toy-test, k: 0, metrics: [avg]}\n"
        "  - {bench: toy-val, k: 2, metrics: [median]}\n  - {bench: x, k: 2, metrics: [pass@4]}\n"
        "average: [maj]\nextra: 1\n"
    )
    with pytest.raises(InputErrors) as info:
        load_suite(str(path))
    text = str(info.value)
    for fragment in ("field 'name'", "benches[0].k", "benches[1].metrics", "benches[2].metrics", "'extra'"):
        assert fragment in text and str(path) in text


def _result(k: int, avg: float, avg_se: float, maj: float | None = None, levels: dict | None = None) -> dict:
    overall = {f"avg@{k}": avg, f"avg@{k}_se": avg_se, "pass@1": avg, "pass@1_se": avg_se, "k": k}
    if maj is not None:
        overall |= {f"maj@{k}": maj, f"maj@{k}_se": 0.1}
    return {"overall": overall} | ({"by_difficulty": levels} if levels else {})


def test_suite_table_columns_macro_averages_and_difficulty_views():
    suite = Suite(
        name="t", description="", eval={}, path=Path("t.yaml"), average=("maj", "avg", "headline"),
        benches=(SuiteBench("a", "A", 4, ("maj", "avg")), SuiteBench("b", "B", 2, ("maj", "avg"))),
    )  # fmt: skip
    levels = {"1": {"avg@4": 0.9, "avg@4_se": 0.05, "len_mean": 30.0, "n_problems": 3.0},
              "2": {"avg@4": 0.2, "avg@4_se": 0.1, "len_mean": 80.0, "n_problems": 2.0}}  # fmt: skip
    table = suite_table(
        suite, {"a": _result(4, 0.5, 0.3, maj=0.6, levels=levels), "b": _result(2, 0.1, 0.4, maj=0.2)}
    )
    cols = {c["name"]: c for c in table["columns"]}
    assert list(cols) == ["A Maj@4", "A Avg@4", "B Maj@2", "B Avg@2", "Average Maj", "Average Avg", "Average"]
    assert cols["Average Avg"]["value"] == pytest.approx(0.3)
    assert cols["Average Avg"]["se"] == pytest.approx(math.sqrt(0.3**2 + 0.4**2) / 2)
    assert cols["Average Maj"]["value"] == pytest.approx(0.4)
    assert cols["Average"]["value"] == pytest.approx(0.4)  # headline = each benchmark's first metric (maj)
    assert table["by_difficulty"]["a"]["2"] == {
        "acc": 0.2,
        "acc_se": 0.1,
        "len_mean": 80.0,
        "n_problems": 2.0,
    }
    text = markdown(table, "m")
    assert "| m | 0.600 ± 0.100 | 0.500 ± 0.300 |" in text and "| 2 | 2 | 0.200 ± 0.100 | 80 |" in text


def test_toy_suite_end_to_end_reuse_and_compare(tmp_path):
    root = tmp_path / "art"
    base = run_ares("--json", "toy", "init", process=False, root=root).stdout
    model = json.loads(base)["artifact_id"] if base.strip().startswith("{") else Path(base.strip()).name
    args = ["--json", "eval", "--suite", "toy", "--model", model, "--limit", "3"]
    first = json.loads(run_ares(*args, process=False, root=root).stdout)
    assert not first["up_to_date"] and set(first["reused"]) == {"toy-test", "toy-val"}
    suite_dir_ = Path(first["path"])
    results = json.loads((suite_dir_ / "results.json").read_text())
    assert results["suite"] == "toy" and set(results["evals"]) == {"toy-test", "toy-val"}
    names = [c["name"] for c in results["columns"]]
    assert names[:3] == ["toy-test Maj@4", "toy-test Avg@4", "toy-test pass@1"] and names[-2:] == [
        "Average Maj",
        "Average Avg",
    ]
    # the suite's values are the evals' own numbers
    toy_test = json.loads((root / "eval" / results["evals"]["toy-test"] / "results.json").read_text())
    assert results["columns"][1]["value"] == toy_test["toy-test"]["overall"]["avg@4"]
    assert "toy-test by difficulty" in (suite_dir_ / "results.md").read_text()
    manifest = json.loads((suite_dir_ / "manifest.json").read_text())
    assert {i.get("artifact_id") for i in manifest["inputs"]} == set(results["evals"].values())
    spent = [
        json.loads((root / "eval" / e / "manifest.json").read_text())["duration_s"]
        for e in results["evals"].values()
    ]
    assert (
        manifest["duration_s"] >= sum(spent) - 0.01
    )  # the suite's time is its evals' time (pipeline reports)

    again = run_ares(*args, process=False, root=root)
    second = json.loads(again.stdout)
    assert second["up_to_date"] and second["artifact_id"] == first["artifact_id"]
    assert second["reused"] == {"toy-test": True, "toy-val": True} and second["evals"] == first["evals"]
    assert "2/2 benchmark evals reused" in again.stderr

    other = json.loads(run_ares(*args, "--seed", "7", process=False, root=root).stdout)
    assert other["artifact_id"] != first["artifact_id"]
    out = run_ares("--json", "report", "compare", f"base={first['artifact_id']}", f"seed7={other['artifact_id']}",
                   "--baseline", "base", process=False, root=root).stdout  # fmt: skip
    table = json.loads(out)
    assert list(table["rows"]) == ["base", "seed7"] and table["columns"] == names
    delta = table["deltas"]["seed7"]["toy-test"]
    a = json.loads((root / "eval" / other["evals"]["toy-test"] / "results.json").read_text())
    expected = a["toy-test"]["overall"]["avg@4"] - toy_test["toy-test"]["overall"]["avg@4"]
    assert delta["delta"] == pytest.approx(expected) and delta["n"] == 3
    mixed = run_ares("report", "compare", f"base={first['artifact_id']}", f"e={first['evals']['toy-test']}",
                     process=False, root=root, check=False)  # fmt: skip
    assert mixed.returncode == 2 and "suite artifacts only" in mixed.stderr


def test_suite_usage_errors(tmp_path):
    no_model = run_ares("eval", "--suite", "toy", process=False, root=tmp_path, check=False)
    assert no_model.returncode == 2 and "--suite needs --model" in no_model.stderr
    with_bench = run_ares(
        "eval",
        "--suite",
        "toy",
        "--model",
        "x",
        "--bench",
        "toy-test",
        process=False,
        root=tmp_path,
        check=False,
    )
    assert with_bench.returncode == 2 and "names its own benchmarks" in with_bench.stderr
    unknown = run_ares("eval", "--suite", "nope", "--model", "x", process=False, root=tmp_path, check=False)
    assert (
        unknown.returncode == 3
        and "known suites: ares-mm, ares-text, paec-math, rehearse-ares, rehearse-paec, toy" in unknown.stderr
    )
