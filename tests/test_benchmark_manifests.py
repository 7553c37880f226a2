"""Every benchmark manifest's field map on a small local fixture laid out like its source (no download).

LogicVista, MMMU and MMMU-Pro are checked on their real layouts only (a keyed JSON object; image_1..7
parquet columns): ``tests/test_manifest_fixtures.py``, like every manifest there.

Each fixture row uses the source's real column names; the test copies the shipped manifest, points its
source at the fixture (keeping field map, subset, grader and aggregate) and checks the mapped records.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import ares_cli
from ares_cli.data.loader import load_problems
from ares_cli.data.manifests import HFSource, load_manifest
from ares_cli.grading.choice import choice_gold, gold_letter
from ares_cli.grading.registry import resolve_grader

REPO_MANIFESTS = Path(ares_cli.__file__).resolve().parents[1] / "data_manifests"

# name -> (fixture rows in the source's layout, expected (id, answer, problem start, meta subset) per record)
FIXTURES: dict[str, tuple[list[dict], list[tuple]]] = {
    "mathverse": (
        [
            {"sample_index": "1", "problem_index": "1", "problem_version": "Text Dominant", "question": "Q",
             "image": "img/1.png", "answer": "A", "question_type": "multi-choice", "query_cot": "text q"},
            {"sample_index": "5", "problem_index": "1", "problem_version": "Vision Only", "question": "",
             "image": "img/1.png", "answer": "A", "question_type": "multi-choice",
             "query_cot": "According to the question shown in the image"},
        ],
        [("5", "A", "According to the question", {"problem_version": "Vision Only", "problem_index": "1"})],
    ),
    "mathvision": (
        [
            {"id": "1", "question": "Which shape?", "options": ["A", "B", "C", "D", "E"], "decoded_image": "i.png",
             "answer": "C", "solution": None, "level": 2, "subject": "metric geometry - area"},
            {"id": "2", "question": "How many?", "options": [], "decoded_image": "j.png", "answer": "7",
             "solution": None, "level": 5, "subject": "counting"},
        ],
        [("1", "C", "Which shape?\n\n(A) A", {"difficulty": 2, "options": ["A", "B", "C", "D", "E"]}),
         ("2", "7", "How many?", {"difficulty": 5})],
    ),
    "mathvista": (
        [{"pid": "1", "question": "What is x?", "query": "Hint: ...\nQuestion: What is x?", "decoded_image": "a.png",
          "choices": None, "answer": "3", "question_type": "free_form", "answer_type": "integer",
          "precision": None}],
        [("1", "3", "Hint: ...", {"question_type": "free_form"})],
    ),
    "dynamath": (
        [
            {"id": 1, "question": "Area?", "decoded_image": "v1.png", "ground_truth": "4", "answer_type": "float",
             "subject": "PG", "knowledge_level": "high school"},
            {"id": 1, "question": "Area?", "decoded_image": "v2.png", "ground_truth": "9", "answer_type": "float",
             "subject": "PG", "knowledge_level": "high school"},
        ],
        [("dynamath-0", "4", "Area?", {"qid": 1, "difficulty": "high school"}),
         ("dynamath-1", "9", "Area?", {"qid": 1})],
    ),
    "wemath": (
        [
            {"ID": "3steps_7", "split": "testmini", "knowledge concept": "Sectors", "question": "Find r.",
             "option": "A. 1; B. 2", "answer": "B", "image_path": "w.png", "key": "3steps_1"},
            {"ID": "3steps_7", "split": "testmini", "knowledge concept": "Squares", "question": "Find A.",
             "option": "A. 4; B. 8", "answer": "A", "image_path": "w.png", "key": "3steps_multi"},
        ],
        [("wemath-0", "B", "Find r.\nA. 1; B. 2", {"wemath_id": "3steps_7", "wemath_key": "3steps_1"}),
         ("wemath-1", "A", "Find A.", {"wemath_key": "3steps_multi"})],
    ),
    "charxiv": (
        [{"reasoning_q": "Which line is highest?", "reasoning_a": "blue", "image": "c.png"}],
        [("charxiv-0", "blue", "Which line", {})],
    ),
    "mmstar": (
        [{"index": 0, "question": "What color?\nOptions: A: red, B: blue", "image": "s.png", "answer": "B",
          "category": "coarse perception", "l2_category": "image scene"}],
        [("mmstar-0", "B", "What color?", {"category": "coarse perception"})],
    ),
    "mmlu-pro": (
        [{"question_id": 70, "question": "Typical advertising?", "options": ["a", "b", "c"], "answer": "C",
          "answer_index": 2, "cot_content": "", "category": "business", "src": "ori_mmlu"}],
        [("70", "C", "Typical advertising?\n\n(A) a\n(B) b\n(C) c", {"category": "business"})],
    ),
    "bbeh": (
        [{"input": "Is the statement true?", "target": "yes", "task": "boolean_expressions"}],
        [("bbeh-0", "yes", "Is the statement", {"task": "boolean_expressions"})],
    ),
    "gpqa-diamond": (
        [{"Record ID": "rec1", "Question": "Which particle?", "Correct Answer": "muon",
          "Incorrect Answer 1": "pion", "Incorrect Answer 2": "kaon", "Incorrect Answer 3": "tau",
          "High-level domain": "Physics"}],
        [("rec1", "muon", "Which particle?", {"domain": "Physics"})],
    ),
    "olympiadbench": (
        [{"id": 1606, "question": "Find n.", "final_answer": ["$12$"], "subfield": "Combinatorics"}],
        [("1606", "$12$", "Find n.", {"subfield": "Combinatorics"})],
    ),
    "aime2026": (
        [{"problem_idx": 1, "problem": "Find the remainder.", "answer": 277}],
        [("1", "277", "Find the remainder.", {})],
    ),
    "aime2023": (
        [
            {"id": 60, "problem": "P22", "solution": "", "answer": "5",
             "url": "https://artofproblemsolving.com/wiki/index.php/2022_AIME_I_Problems/Problem_1"},
            {"id": 61, "problem": "P23", "solution": "", "answer": "12",
             "url": "https://artofproblemsolving.com/wiki/index.php/2023_AIME_II_Problems/Problem_3"},
        ],
        [("61", "12", "P23", {})],
    ),
    "math500": (
        [{"problem": "Compute 1+1.", "solution": "...", "answer": "2", "subject": "Algebra", "level": 1,
          "unique_id": "test/algebra/1.json"}],
        [("test/algebra/1.json", "2", "Compute 1+1.", {"difficulty": 1, "level": 1, "subject": "Algebra"})],
    ),
    "gsm8k": (
        [{"question": "Tom has 3 apples...", "answer": "3 + 4 = 7\n#### 7"}],
        [("gsm8k-0", "7", "Tom has 3", {})],
    ),
    "amc23": ([{"question": "Find x.", "answer": 27.0}], [("amc23-0", "27", "Find x.", {})]),
    "aime2024": ([{"problem": "Find N.", "answer": "204"}], [("aime2024-0", "204", "Find N.", {})]),
    "aime2025": ([{"question": "Find M.", "answer": "70"}], [("aime2025-0", "70", "Find M.", {})]),
}  # fmt: skip

GRADERS = {
    "mathverse": "math", "mathvision": "choice_or_math", "mathvista": "choice_or_math", "dynamath": "math",
    "wemath": "choice",
    "logicvista": "choice", "mmmu": "choice_or_math", "mmmu-pro": "choice", "charxiv": "math", "mmstar": "choice",
    "mmlu-pro": "choice", "bbeh": "exact_match", "gpqa-diamond": "choice",
    "olympiadbench": "math", "aime2026": "math", "aime2023": "math", "math500": "math", "gsm8k": "math",
    "amc23": "math", "aime2024": "math", "aime2025": "math",
}  # fmt: skip


def localised(name: str, rows: list[dict], tmp_path: Path) -> Path:
    """A copy of the shipped manifest reading ``rows`` from a local file (no expected_rows)."""
    doc = yaml.safe_load((REPO_MANIFESTS / f"{name}.yaml").read_text())
    image_column = (doc.get("field_map") or {}).get("images")
    for row in rows:  # a real (1x1) image file for every image path the fixture names
        if image_column and isinstance(row.get(image_column), str):
            from PIL import Image

            target = tmp_path / row[image_column]
            target.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (1, 1)).save(target, format="PNG")
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc["source"] = {"local": {"path": str(data)}}
    doc.pop("expected_rows", None)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_manifest_field_map_on_fixture(name, tmp_path):
    rows, expected = FIXTURES[name]
    records = load_problems(str(localised(name, rows, tmp_path))).records
    assert len(records) == len(expected)
    for record, (rid, answer, problem_start, meta) in zip(records, expected, strict=True):
        assert record["id"] == rid and record["answer"] == answer and record["source"] == name
        assert record["problem"].startswith(problem_start), record["problem"]
        assert meta.items() <= (record.get("meta") or {}).items()
        if load_manifest(name).field_map.images != "images":  # the manifest names an image column
            assert len(record["images"]) == 1 and Path(record["images"][0]).is_file()


@pytest.mark.parametrize("name", sorted(GRADERS))
def test_manifest_names_grader_source_and_licence(name):
    m = load_manifest(name)
    assert m.grader == GRADERS[name] and resolve_grader(m.grader)
    assert m.licence and m.description
    assert isinstance(m.source, HFSource) or name == "logicvista"


def test_multi_split_and_multi_config_sources():
    dyna = load_manifest("dynamath")
    assert dyna.source.split == "+".join(f"sample_variant{i}" for i in range(1, 11))
    assert len(load_manifest("mmmu").source.configs) == 30


def test_gpqa_options_are_shuffled_reproducibly_and_gold_resolves(tmp_path):
    rows = [
        {"Record ID": f"r{i}", "Question": f"Q{i}", "Correct Answer": "right", "Incorrect Answer 1": "w1",
         "Incorrect Answer 2": "w2", "Incorrect Answer 3": "w3", "High-level domain": "Chemistry"}
        for i in range(12)
    ]  # fmt: skip
    path = localised("gpqa-diamond", rows, tmp_path)
    first, again = load_problems(str(path)).records, load_problems(str(path)).records
    assert first == again
    letters = []
    for record in first:
        options = record["meta"]["options"]
        assert sorted(options) == ["right", "w1", "w2", "w3"]
        letter = gold_letter(choice_gold(record["answer"], options))
        assert f"({letter}) right" in record["problem"]
        letters.append(letter)
    assert len(set(letters)) > 1  # the correct option is not always first


def test_subset_without_match_is_an_input_error(tmp_path):
    from ares_cli.errors import InputError

    rows = [{"sample_index": "1", "problem_index": "1", "problem_version": "Text Only", "question": "q",
             "image": "a.png", "answer": "A", "question_type": "free-form", "query_cot": "q"}]  # fmt: skip
    with pytest.raises(InputError, match="no row matches the subset"):
        load_problems(str(localised("mathverse", rows, tmp_path)))


def test_math500_levels_and_response_length_per_level_through_eval(tmp_path):
    """MATH-500's `level` becomes the difficulty: eval reports accuracy and mean length per level 1-5."""
    from ares_cli.stages.evaluate import EvalConfig, run_eval
    from ares_cli.store.artifacts import ArtifactStore

    rows = [{"problem": f"P{lv}", "solution": "", "answer": str(lv), "subject": "Algebra", "level": lv,
             "unique_id": f"test/{lv}.json"} for lv in range(1, 6)]  # fmt: skip
    manifest = localised("math500", rows, tmp_path)
    samples = tmp_path / "samples.jsonl"
    lines = []
    for lv in range(1, 6):
        for i in range(2):  # level lv: both right below level 4, one right from level 4; length 100 * lv + i
            right = lv < 4 or i == 0
            lines.append({"problem_id": f"test/{lv}.json", "sample_idx": i, "n_tokens": 100 * lv + i,
                          "response": f"\\boxed{{{lv if right else 0}}}"})  # fmt: skip
    samples.write_text("".join(json.dumps(r) + "\n" for r in lines))
    _, results = run_eval(
        ArtifactStore(tmp_path / "art"), model=None, cfg=EvalConfig(grade_workers=1), data=str(manifest),
        from_samples=str(samples), log=lambda m: None,
    )  # fmt: skip
    levels = results["math500"]["by_difficulty"]
    assert list(levels) == ["1", "2", "3", "4", "5"]
    assert [levels[str(lv)]["len_mean"] for lv in range(1, 6)] == [100.5, 200.5, 300.5, 400.5, 500.5]
    assert [levels[str(lv)]["avg@2"] for lv in range(1, 6)] == [1.0, 1.0, 1.0, 0.5, 0.5]
