"""Every benchmark manifest on a fixture in its dataset's real layout, through the real loader.

``tests/fixtures/datasets/<manifest>/`` holds a few hand-made rows laid out as the hub (or the benchmark's
repository) serves them (``make_fixtures.py`` writes them; the manifest's comments cite the layout). Each
test copies the shipped manifest, points its hub id (or local path) at the fixture and keeps everything
else (configs, splits, field map, subset, exclusions, dedup), so ``datasets.load_dataset`` reads the
fixture as it reads the hub's files; then ``ares data check`` runs on the same copy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ares_cli.data.loader import load_problems
from ares_cli.data.manifests import HFSource, list_manifests, load_manifest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "datasets"
LOCAL_FIXTURE = {"logicvista": "data/dataset.json"}  # manifests whose source is a local file
FIXTURE_CONFIGS = {
    "mmmu": ["Art", "Math", "Physics"]
}  # the fixture holds 3 of the manifest's 30 subject configs

# name -> (source rows in the fixture, [(id, answer, images, problem start, meta subset)])
EXPECTED: dict[str, tuple[int, list[tuple]]] = {
    "aime2023": (3, [("61", "012", 0, "Find $m$ (2023).", {"url": "https://artofproblemsolving.com/wiki/index.php/2023_AIME_I_Problems/Problem_3"}),
                     ("62", "110", 0, "Find $k$", {})]),
    "aime2024": (2, [("aime2024-0", "204", 0, "Find the remainder", {}), ("aime2024-1", "025", 0, "Find $p+q$", {})]),
    "aime2025": (2, [("aime2025-0", "70", 0, "Find the sum", {}), ("aime2025-1", "588", 0, "Find $x$", {})]),
    "aime2026": (2, [("1", "277", 0, "Find the remainder.", {}), ("2", "45", 0, "Find $m+n$", {})]),
    "amc23": (2, [("amc23-0", "27", 0, "Find $x$", {}), ("amc23-1", "0.5", 0, "Find $y$", {})]),
    "bbeh": (3, [("bbeh-0", "yes", 0, "Is the expression", {"task": "boolean_expressions"}),
                 ("bbeh-1", "(a)", 0, "Which option?", {}), ("bbeh-2", "404", 0, "How many?", {})]),
    "charxiv": (2, [("charxiv-0", "blue", 1, "Which line is highest", {}), ("charxiv-1", "3", 1, "How many peaks", {})]),
    "dapo-math-17k": (6, [("dapo-math-17k-0", "21", 0, "Solve the following math problem step by step.", {}),
                          ("dapo-math-17k-1", "31", 0, "Solve the following", {})]),
    "dynamath": (20, [(f"dynamath-{2 * (v - 1) + k}", a, 1, q, {"qid": str(k + 1), "subject": sub})
                      for v in range(1, 11)
                      for k, (a, q, sub) in enumerate(((str(v * v), "What is the area", "PG"),
                                                       (f"{2.0944 * v:.4f}", "What is $f(2)$?", "AL")))]),
    "gpqa-diamond": (2, [("recA1", "muon", 0, "Which particle decays?\n\n(A) ", {"domain": "Physics"}),
                         ("recB2", "benzene", 0, "Which compound, at 300 K?", {"domain": "Chemistry"})]),
    "gsm8k": (2, [("gsm8k-0", "7", 0, "Tom has 3 apples", {}), ("gsm8k-1", "2,500", 0, "A pen costs", {})]),
    "logicvista": (3, [("v1_0", "C", 1, "What choice (A, B, C, or D)", {"skill": ["inductive"]}),
                       ("v1_1", "A, C", 1, "Which choices (A-D)", {"skill": ["inductive"]})]),
    "math500": (2, [("test/prealgebra/1.json", "\\frac{3}{4}", 0, "Compute", {"difficulty": 1, "subject": "Prealgebra"}),
                    ("test/precalculus/807.json", "\\left( 3, \\frac{\\pi}{2} \\right)", 0, "Convert", {"level": 2})]),
    "mathverse": (5, [("5", "B", 1, "Please answer (Vision Only)", {"problem_version": "Vision Only", "problem_index": "1"})]),
    "mathvision": (3, [("1", "C", 1, "Which shape comes next?\n<image1>\n\n(A) A", {"difficulty": 2, "options": ["A", "B", "C", "D", "E"]}),
                       ("2", "7", 1, "How many dots?", {"difficulty": 5}),
                       ("3", "60°", 1, "Which is the angle?", {"options": ["30°", "45°", "60°", "90°", "120°"]})]),
    "mathvista": (2, [("1", "145°", 1, "Hint: Please answer the question and provide the correct option letter",
                       {"options": ["145°", "35°", "55°", "125°"], "question_type": "multi_choice"}),
                      ("2", "3", 1, "Hint: Please answer the question requiring an integer", {"answer_type": "integer"})]),
    "mmlu-pro": (2, [("70", "A", 0, "Typical advertising regulatory bodies suggest?\n\n(A) Safe practices", {"category": "business"}),
                     ("71", "J", 0, "Which is largest?", {"src": "stemez"})]),
    "mmmu-pro": (2, [("test_Art_1", "J", 1, "Which painting is <image 1>?\n\n(A) painter 0", {"subject": "Art", "difficulty": "Medium"}),
                     ("test_Math_2", "C", 3, "Compare <image 1>, <image 2> and <image 3>", {"subject": "Math"})]),
    "mmmu": (3, [("validation_Art_1", "A", 1, "<image 1> Who painted it?\n\n(A) Monet\n(B) Manet", {"subfield": "Painting"}),
                 ("validation_Math_2", "14", 2, "<image 1> and <image 2>: compute the area.", {"question_type": "open"}),
                 ("validation_Physics_3", "['24/7', '3.429']", 1, "<image 1> The speed?", {"difficulty": "Easy"})]),
    "mmstar": (2, [("mmstar-0", "A", 1, "What color is it?\nOptions: A: red", {"category": "coarse perception"}),
                   ("mmstar-1", "C", 1, "Which is on the left?", {"l2_category": "object location"})]),
    "olympiadbench": (2, [("1606", "$12$", 0, "Find the number $n$.", {"subfield": "Combinatorics"}),
                          ("1607", "$3$, $5$", 0, "Find all $x$.", {"subfield": "Algebra"})]),
    "wemath": (3, [("wemath-0", "B", 1, "Find r.\nA. 1; B. 2; C. 3", {"wemath_id": "3steps_7", "wemath_key": "3steps_1"}),
                   ("wemath-1", "A", 1, "Find the area.\nA. 4", {"knowledge_concept": "Squares"}),
                   ("wemath-2", "C", 1, "Find the area of the shaded part.", {"wemath_key": "3steps_multi"})]),
}  # fmt: skip


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    monkeypatch.setenv("ARES_IMAGE_CACHE", str(tmp_path / "images"))
    monkeypatch.delenv("ARES_MANIFESTS", raising=False)


def on_fixture(name: str, tmp_path: Path) -> Path:
    """The shipped manifest ``name`` reading its fixture: hub id (or local path) replaced, all else kept;
    ``expected_rows`` set to the fixture's row count, so the count is checked as on the hub."""
    doc = yaml.safe_load((REPO / "data_manifests" / f"{name}.yaml").read_text())
    if "hf" in doc["source"]:
        doc["source"]["hf"]["id"] = str(FIXTURES / name)
        if name in FIXTURE_CONFIGS:
            assert set(FIXTURE_CONFIGS[name]) <= set(doc["source"]["hf"]["config"])
            doc["source"]["hf"]["config"] = FIXTURE_CONFIGS[name]
    else:
        doc["source"]["local"]["path"] = str(FIXTURES / name / LOCAL_FIXTURE[name])
    doc["expected_rows"] = EXPECTED[name][0]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_every_benchmark_manifest_has_a_fixture_and_evidence():
    shipped = {n for n in list_manifests() if not n.startswith(("toy", "rehearse"))}
    assert shipped == set(EXPECTED), "a benchmark manifest without a fixture test (or a stale entry)"
    for name in EXPECTED:
        text = (REPO / "data_manifests" / f"{name}.yaml").read_text()
        assert "# Evidence:" in text and f"tests/fixtures/datasets/{name}" in text, name
        assert (FIXTURES / name).is_dir(), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_manifest_loads_its_real_layout_fixture(name, tmp_path):
    rows, expected = EXPECTED[name]
    loaded = load_problems(on_fixture(name, tmp_path))
    by_id = {r["id"]: r for r in loaded.records}
    assert loaded.provenance["total_rows"] == rows
    for rid, answer, n_images, start, meta in expected:
        record = by_id[rid]
        assert record["answer"] == answer and record["source"] == load_manifest(name).source_label
        assert record["problem"].startswith(start), record["problem"]
        assert len(record.get("images") or []) == n_images
        assert all(Path(p).is_file() for p in record.get("images") or [])
        assert meta.items() <= (record.get("meta") or {}).items(), record.get("meta")
    if isinstance(load_manifest(name).source, HFSource):
        assert loaded.provenance["path_or_id"] == str(FIXTURES / name)


def test_mmmu_images_follow_the_image_tags_in_order(tmp_path):
    loaded = load_problems(on_fixture("mmmu-pro", tmp_path))
    two = next(r for r in loaded.records if r["id"] == "test_Math_2")
    from PIL import Image

    colours = [Image.open(p).convert("RGB").getpixel((0, 0)) for p in two["images"]]
    assert colours == [(30, 160, 30), (30, 30, 200), (128, 128, 128)]  # image_1, image_2, image_3


def test_dapo_duplicates_are_dropped_and_counted(tmp_path):
    loaded = load_problems(on_fixture("dapo-math-17k", tmp_path))
    assert len(loaded) == 2 and loaded.provenance["rows_report"]["duplicates"]["dropped"] == 4


def test_logicvista_leaves_out_the_published_empty_row_with_its_reason(tmp_path):
    loaded = load_problems(on_fixture("logicvista", tmp_path))
    assert [r["id"] for r in loaded.records] == ["v1_0", "v1_1"]
    [excluded] = loaded.provenance["rows_report"]["excluded"]
    assert excluded["id"] == "v1_382" and "empty question" in excluded["reason"]


def test_mathverse_keeps_the_vision_only_version(tmp_path):
    loaded = load_problems(on_fixture("mathverse", tmp_path))
    assert [r["meta"]["problem_version"] for r in loaded.records] == ["Vision Only"]
    assert loaded.provenance["rows_report"]["subset_rows"] == 1


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_data_check_on_each_fixture(name, tmp_path):
    from ares_cli.commands import data as data_cmd

    result = CliRunner().invoke(data_cmd.app, ["check", str(on_fixture(name, tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["valid"] is True and summary["source_rows"] == EXPECTED[name][0]
    assert sum(summary["answer_forms"].values()) == summary["rows"]
    images = sum(len(r[2:3]) and r[2] for r in EXPECTED[name][1])
    assert (summary["image_stats"]["images"] > 0) == (images > 0)


def test_the_fixture_files_are_what_make_fixtures_writes(tmp_path, monkeypatch):
    """The committed fixtures are the generator's output (compared by content: row values and file lists)."""
    import importlib.util
    import shutil

    copy = tmp_path / "datasets"
    shutil.copytree(FIXTURES, copy, ignore=shutil.ignore_patterns("*.parquet", "*.json", "*.jsonl", "*.csv", "*.png",
                                                                  "README.md"))  # fmt: skip
    spec = importlib.util.spec_from_file_location("make_fixtures", copy / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build()
    committed = sorted(
        p.relative_to(FIXTURES) for p in FIXTURES.rglob("*") if p.is_file() and p.suffix != ".py"
    )
    written = sorted(p.relative_to(copy) for p in copy.rglob("*") if p.is_file() and p.suffix != ".py")
    assert committed == written
    import pyarrow.parquet as pq

    for rel in committed:
        a, b = FIXTURES / rel, copy / rel
        if rel.suffix == ".parquet":
            assert pq.read_table(a).to_pylist() == pq.read_table(b).to_pylist(), rel
        else:
            assert a.read_bytes() == b.read_bytes(), rel


# name -> [(row id, response, grade)]: the fixture's loaded rows graded by the manifest's declared grader
GRADED_ON_FIXTURE = {
    "mathvista": [("1", r"\boxed{A}", "correct"), ("1", r"\boxed{145^\circ}", "correct"),
                  ("1", r"\boxed{B}", "incorrect"), ("2", r"\boxed{3}", "correct"), ("2", r"\boxed{A}", "incorrect")],
    "dynamath": [("dynamath-1", r"\boxed{2.094}", "correct"), ("dynamath-1", r"\boxed{\frac{2\pi}{3}}", "correct"),
                 ("dynamath-1", r"\boxed{2.09}", "incorrect"), ("dynamath-1", r"\boxed{2.1}", "incorrect")],
    "logicvista": [("v1_1", r"\boxed{A, C}", "correct"), ("v1_1", r"\boxed{C, A}", "correct"),
                   ("v1_1", r"\boxed{A}", "incorrect"), ("v1_1", r"\boxed{A, B, C}", "incorrect")],
    "dapo-math-17k": [("dapo-math-17k-0", "So the sum is 21.\n\nAnswer: 21", "correct"),
                      ("dapo-math-17k-0", "Answer: 21\n\nWait, it is 22.", "invalid")],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(GRADED_ON_FIXTURE))
def test_fixture_rows_are_graded_by_the_manifests_declared_grader(name, tmp_path):
    """End to end: rows loaded from the real layout carry what their grading needs (options, golds),
    and the grader the manifest declares (with its options) grades the benchmark's own answer forms."""
    from ares_cli.grading import GradingPool
    from ares_cli.grading.declared import grader_for

    by_id = {r["id"]: r for r in load_problems(on_fixture(name, tmp_path)).records}
    cases = GRADED_ON_FIXTURE[name]
    with GradingPool(grader_for(None, load_manifest(name)), workers=1, timeout_s=30) as pool:
        golds = [pool.gold_for(by_id[rid]) for rid, _, _ in cases]
        grades = [r.grade for r in pool.grade(list(zip(golds, [resp for _, resp, _ in cases], strict=True)))]
    assert grades == [grade for _, _, grade in cases]
