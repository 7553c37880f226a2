"""The loader's row pass: dedup by prompt, exclusions by id, skip_invalid_rows, the keyed_object layout,
several image columns, image_dir, append_options, and manifest names before same-named folders."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from ares_cli.data.loader import load_problems
from ares_cli.errors import InputError, InputErrors

DAPO = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{p}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def _dapo_rows(unique: int, repeats: int) -> list[dict]:
    return [
        {"data_source": "math_dapo", "prompt": [{"content": DAPO.format(p=f"Find {i} + {i}."), "role": "user"}],
         "ability": "MATH", "reward_model": {"ground_truth": str(2 * i), "style": "rule-lighteval/MATH_v2"},
         "extra_info": {"index": f"uuid-{r}-{i}"}}
        for r in range(repeats) for i in range(unique)
    ]  # fmt: skip


def _manifest(tmp_path, name: str, source: dict, **keys) -> str:
    doc = {"name": name, "description": "test", "source": source, "licence": "test", **keys}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def _parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_dedup_by_prompt_keeps_the_first_id_and_counts_every_drop(tmp_path):
    data = _parquet(tmp_path / "data" / "dapo.parquet", _dapo_rows(unique=5, repeats=4))
    fmap = {"problem": "prompt.0.content", "answer": "reward_model.ground_truth", "id_from": "index"}
    manifest = _manifest(tmp_path, "dapo", {"local": {"path": str(data)}}, field_map=fmap, dedup="prompt",
                         expected_rows=20)  # fmt: skip
    loaded = load_problems(manifest)
    assert [r["id"] for r in loaded] == [f"dapo-{i}" for i in range(5)]  # the first row of each prompt
    assert [r["answer"] for r in loaded] == ["0", "2", "4", "6", "8"]
    report = loaded.provenance["rows_report"]
    assert report["source_rows"] == 20 and report["duplicates"]["dropped"] == 15
    assert report["duplicates"]["conflicting_golds"] == 0
    without = load_problems(manifest, field_map={"id_from": "extra_info.index"})  # same map, other ids
    assert len(without) == 5 and without.records[0]["id"] == "uuid-0-0"


def test_dedup_counts_a_duplicate_with_another_gold_as_a_conflict(tmp_path):
    rows = _dapo_rows(unique=2, repeats=2)
    rows[3]["reward_model"]["ground_truth"] = "99"  # the second copy of prompt 1 disagrees
    data = _parquet(tmp_path / "d.parquet", rows)
    fmap = {"problem": "prompt.0.content", "answer": "reward_model.ground_truth", "id_from": "index"}
    loaded = load_problems(
        _manifest(tmp_path, "d", {"local": {"path": str(data)}}, field_map=fmap, dedup="prompt")
    )
    dup = loaded.provenance["rows_report"]["duplicates"]
    assert dup["dropped"] == 2 and dup["conflicting_golds"] == 1
    assert dup["conflicts"] == [{"id": "d-3", "file": str(data), "row": 4, "answer": "99", "kept_id": "d-1",
                                 "kept_answer": "2"}]  # fmt: skip


def test_without_dedup_every_copy_is_a_record_and_data_check_counts_them(tmp_path):
    from ares_cli.data.summary import check_source

    data = _parquet(tmp_path / "d.parquet", _dapo_rows(unique=3, repeats=3))
    fmap = "problem=prompt.0.content,answer=reward_model.ground_truth,id=index"
    summary = check_source(str(data), field_map=fmap, self_grade=False)
    assert summary["rows"] == 9 and summary["repeated_prompts"] == 6
    assert summary["answer_forms"] == {"integer": 9}


def test_exclude_drops_named_rows_with_their_reason_and_a_stale_id_is_an_error(tmp_path):
    data = tmp_path / "set.json"
    data.write_text(json.dumps({"v1_0": {"question": "Q0?", "answer": "A"},
                                "v1_1": {"question": "", "answer": ""},
                                "v1_2": {"question": "Q2?", "answer": "B"}}))  # fmt: skip
    source = {"local": {"path": str(data), "layout": "keyed_object"}}
    fmap = {"problem": "question", "answer": "answer", "id_from": "id"}
    with pytest.raises(InputErrors) as info:  # the default: the broken row refuses the benchmark
        load_problems(_manifest(tmp_path, "lv", source, field_map=fmap))
    assert {(e.file, e.row, e.field) for e in info.value.errors} == {(str(data), 2, "problem"),
                                                                     (str(data), 2, "answer")}  # fmt: skip
    manifest = _manifest(tmp_path, "lv", source, field_map=fmap,
                         exclude=[{"id": "v1_1", "reason": "empty question and answer"}])  # fmt: skip
    loaded = load_problems(manifest)
    assert [r["id"] for r in loaded] == ["v1_0", "v1_2"]
    assert loaded.provenance["rows_report"]["excluded"] == [
        {"id": "v1_1", "reason": "empty question and answer", "file": str(data), "row": 2}
    ]
    stale = _manifest(tmp_path, "lv", source, field_map=fmap,
                      exclude=[{"id": "v1_1", "reason": "r"}, {"id": "v9_9", "reason": "gone"}])  # fmt: skip
    with pytest.raises(InputError, match="excluded id 'v9_9' matches no row"):
        load_problems(stale)


def test_exclude_entries_are_checked_when_the_manifest_is_parsed(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "a", "problem": "p", "answer": "1"}\n')
    for bad, field in (([{"id": "a"}], "exclude[0]"), ([{"id": "a", "reason": " "}], "exclude[0].reason"),
                       ("a", "exclude"), ([{"id": "a", "reason": "x"}, {"id": "a", "reason": "y"}], "exclude[1].id")):  # fmt: skip
        with pytest.raises(InputErrors) as info:
            load_problems(_manifest(tmp_path, "d", {"local": {"path": str(data)}}, exclude=bad))
        assert field in {e.field for e in info.value.errors}
    with pytest.raises(InputErrors, match="dedup"):
        load_problems(_manifest(tmp_path, "d", {"local": {"path": str(data)}}, dedup="answer"))


def test_skip_invalid_rows_lists_and_counts_every_dropped_row(tmp_path):
    from ares_cli.commands import data as data_cmd

    path = tmp_path / "rows.jsonl"
    path.write_text(
        '{"id": "a", "problem": "1+1?", "answer": "2"}\n'
        '{"id": "b", "problem": "", "answer": "3"}\n'
        "{not json\n"
        '{"id": "c", "problem": "2+2?", "answer": "4"}\n'
        '{"id": "d", "problem": "3+3?"}\n'
    )
    with pytest.raises(InputErrors) as info:  # default: every bad row named, nothing loaded
        load_problems(str(path))
    assert {(e.row, e.field) for e in info.value.errors} == {(2, "problem"), (3, None), (5, "answer")}
    with pytest.raises(InputErrors):  # a malformed line is not a row that can be skipped
        load_problems(str(path), skip_invalid_rows=True)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2] + lines[3:]) + "\n")
    loaded = load_problems(str(path), skip_invalid_rows=True)
    assert [r["id"] for r in loaded] == ["a", "c"]
    skipped = loaded.provenance["rows_report"]["skipped_invalid"]
    assert skipped["count"] == 2
    assert [(s["row"], s["id"], [e["field"] for e in s["errors"]]) for s in skipped["rows"]] == [
        (2, "b", ["problem"]), (4, "d", ["answer"]),
    ]  # fmt: skip
    assert skipped["rows"][0]["errors"][0]["message"] == "is empty"
    result = CliRunner().invoke(data_cmd.app, ["check", str(path), "--skip-invalid-rows", "--no-self-grade",
                                               "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["rows"] == 2 and summary["skipped_invalid"]["count"] == 2
    assert f"skipped: {path}:4 id 'd': answer: missing" in result.stderr


def test_keyed_object_layout_needs_an_object_and_a_plain_array_needs_the_records_layout(tmp_path):
    data = tmp_path / "set.json"
    data.write_text(json.dumps({"k1": {"problem": "p", "answer": "1"}}))
    with pytest.raises(InputError, match="declare layout: keyed_object"):
        load_problems(str(data))
    data.write_text(json.dumps([{"problem": "p", "answer": "1"}]))
    with pytest.raises(InputError, match="keyed_object expects one JSON object"):
        load_problems(_manifest(tmp_path, "k", {"local": {"path": str(data), "layout": "keyed_object"}}))
    data.write_text(json.dumps({"k1": {"id": "other", "problem": "p", "answer": "1"}}))
    with pytest.raises(InputErrors, match="the record's own 'id' is 'other'"):
        load_problems(_manifest(tmp_path, "k", {"local": {"path": str(data), "layout": "keyed_object"}}))
    with pytest.raises(InputErrors, match="layout"):
        load_problems(_manifest(tmp_path, "k", {"local": {"path": str(data), "layout": "dict"}}))


def test_several_image_columns_in_order_empty_ones_skipped(tmp_path):
    from PIL import Image

    for name, color in (("a.png", "red"), ("b.png", "blue"), ("c.png", "green")):
        Image.new("RGB", (4, 4), color).save(tmp_path / name)
    rows = [{"id": "1", "question": "<image 1> and <image 2>?", "image_1": "a.png", "image_2": "c.png",
             "image_3": None, "answer": "A"},
            {"id": "2", "question": "<image 1>?", "image_1": "b.png", "image_2": None, "image_3": None,
             "answer": "B"}]  # fmt: skip
    path = _parquet(tmp_path / "mm.parquet", rows)
    loaded = load_problems(
        str(path), field_map={"problem": "question", "images": ["image_1", "image_2", "image_3"]}
    )
    assert [[p.rsplit("/", 1)[-1] for p in r["images"]] for r in loaded] == [["a.png", "c.png"], ["b.png"]]
    with pytest.raises(
        InputErrors, match="column 'image_4' \\(for images\\) not found"
    ):  # a typo is not text-only
        load_problems(str(path), field_map={"problem": "question", "images": ["image_1", "image_4"]})


def test_image_dir_resolves_relative_paths_and_cannot_leave_the_folder(tmp_path):
    from PIL import Image

    (tmp_path / "images").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "images" / "v1_0.png")
    data = tmp_path / "dataset.json"
    data.write_text(json.dumps({"v1_0": {"imagename": "v1_0.png", "question": "Q?", "answer": "A"}}))
    source = {"local": {"path": str(data), "layout": "keyed_object"}}
    fmap = {"problem": "question", "answer": "answer", "id_from": "id", "images": "imagename"}
    with pytest.raises(InputErrors, match="image not found"):  # beside dataset.json there is none
        load_problems(_manifest(tmp_path, "lv", source, field_map=fmap))
    loaded = load_problems(_manifest(tmp_path, "lv", source, field_map={**fmap, "image_dir": "images"}))
    assert loaded.records[0]["images"] == [str(tmp_path / "images" / "v1_0.png")]
    for bad in ("../elsewhere", "/abs"):
        with pytest.raises(InputErrors, match="image_dir"):
            load_problems(_manifest(tmp_path, "lv", source, field_map={**fmap, "image_dir": bad}))


def test_append_options_false_keeps_the_options_in_meta_only(tmp_path):
    rows = [{"pid": "1", "query": "Question: angle?\nChoices:\n(A) 145°\n(B) 35°", "choices": ["145°", "35°"],
             "answer": "145°"}]  # fmt: skip
    path = _parquet(tmp_path / "mv.parquet", rows)
    base = {"problem": "query", "id_from": "pid", "options": "choices"}
    shown = load_problems(str(path), field_map=base).records[0]
    assert shown["problem"].endswith("(A) 145°\n(B) 35°") and shown["problem"].count("145°") == 2
    kept = load_problems(str(path), field_map={**base, "append_options": False}).records[0]
    assert kept["problem"] == rows[0]["query"] and kept["meta"]["options"] == ["145°", "35°"]


def test_a_manifest_name_wins_over_a_same_named_folder_and_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    (tmp_path / "toy-val").mkdir()
    (tmp_path / "toy-val" / "junk.txt").write_text("not a dataset")
    loaded = load_problems("toy-val")
    assert loaded.provenance["kind"] == "manifest" and len(loaded) == 200
    assert "not the folder" in loaded.provenance["resolved"] and "./toy-val" in loaded.provenance["resolved"]
    with pytest.raises(InputErrors, match="field 'problem': missing"):  # ./name is the folder (a text file)
        load_problems("./toy-val")


def test_a_limit_stops_reading_a_parquet_file_early(tmp_path):
    data = _parquet(tmp_path / "big.parquet", _dapo_rows(unique=50, repeats=400))  # 20,000 rows
    fmap = "problem=prompt.0.content,answer=reward_model.ground_truth,id=index"
    loaded = load_problems(str(data), field_map=fmap, limit=3)
    assert len(loaded) == 3 and loaded.provenance["total_rows"] == 20_000


def test_eval_with_skip_invalid_rows_records_every_skipped_row_in_its_stats(tmp_path):
    """``--set skip_invalid_rows=true``: the stage runs on the valid rows and its artifact's stats list the
    rest; without it the stage refuses the data (exit 3) naming the row and field."""
    from ares_cli.stages.evaluate import EvalConfig, run_eval
    from ares_cli.store.artifacts import ArtifactStore

    data = tmp_path / "bench.jsonl"
    data.write_text(
        '{"id": "p1", "problem": "1+1?", "answer": "2"}\n'
        '{"id": "p2", "problem": "2+2?", "answer": ""}\n'
        '{"id": "p3", "problem": "3+3?", "answer": "6"}\n'
    )
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"problem_id": p, "sample_idx": 0, "response": f"\\boxed{{{a}}}",
                                           "n_tokens": 3}) + "\n" for p, a in (("p1", 2), ("p3", 6))))  # fmt: skip
    store = ArtifactStore(tmp_path / "art")
    with pytest.raises(InputErrors) as info:
        run_eval(store, model=None, cfg=EvalConfig(grade_workers=1), data=str(data), from_samples=str(samples),
                 log=lambda m: None)  # fmt: skip
    assert [(e.row, e.field) for e in info.value.errors] == [(2, "answer")]
    run, results = run_eval(store, model=None, cfg=EvalConfig(grade_workers=1, skip_invalid_rows=True),
                            data=str(data), from_samples=str(samples), log=lambda m: None)  # fmt: skip
    stats = store.manifest(run.final_dir)["stats"]["data"]["bench"]
    assert stats["rows"] == 2 and stats["source_rows"] == 3
    assert stats["skipped_invalid"]["count"] == 1
    assert (
        stats["skipped_invalid"]["rows"][0]["row"] == 2 and stats["skipped_invalid"]["rows"][0]["id"] == "p2"
    )
    assert results["bench"]["overall"]["avg@1"] == 1.0


def test_data_check_reports_answer_forms_and_prompt_token_quantiles(tmp_path, tiny_model_dir):
    from ares_cli.data.summary import check_source, quantiles
    from ares_cli.planning.input_checks import sampling_prompt_lengths
    from ares_cli.stages.sampling import SamplingConfig

    rows = [("1", "42", None), ("2", "\\frac{1}{2}", None), ("3", "B", None), ("4", "A, C", None),
            ("5", "['24/7', '3.429']", None), ("6", "145°", ["100°", "145°"]), ("7", "yes", None)]  # fmt: skip
    path = tmp_path / "forms.jsonl"
    path.write_text("".join(json.dumps({"id": i, "source": "s", "problem": "x" * (5 * int(i)), "answer": a,
                                        **({"meta": {"options": o}} if o else {})}) + "\n" for i, a, o in rows))  # fmt: skip
    from ares_cli.commands.data import _prompt_tokens

    summary = check_source(str(path), self_grade=False,
                           count_tokens=(str(tiny_model_dir), _prompt_tokens(str(tiny_model_dir))))  # fmt: skip
    assert summary["answer_forms"] == {
        "integer": 1,
        "latex": 1,
        "choice": 2,
        "multi-choice": 1,
        "list": 1,
        "text": 1,
    }
    assert summary["problem_chars_quantiles"] == {
        "min": 5,
        "p50": 20,
        "p90": 35,
        "p99": 35,
        "max": 35,
        "mean": 20.0,
    }
    records = load_problems(str(path)).records
    expected = quantiles(sampling_prompt_lengths(records, str(tiny_model_dir), SamplingConfig()))
    assert (
        summary["prompt_tokens"] == {"model": str(tiny_model_dir), **expected}
        and expected["max"] > expected["min"]
    )
    assert check_source(str(path), self_grade=False)["prompt_tokens"] is None
