"""load_problems: local files with field maps, GSM8K extraction, hub configs (monkeypatched, never network)."""

from __future__ import annotations

import json

import pytest

from ares_cli.data.loader import load_problems, parse_hf_spec
from ares_cli.errors import EXIT_USAGE, InputError, InputErrors, UsageError
from ares_cli.store.hashing import sha256_file, sha256_records

GSM_ROWS = [
    {"question": "Janet has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "A train goes 60 km/h for 2 h. Distance?", "answer": "60 * 2 = 120 km\n#### 120"},
    {"question": "Costs 1,250 dollars twice?", "answer": "It is 1,250*2 = 2,500.\n#### 2,500"},
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("ARES_MANIFESTS", raising=False)


@pytest.fixture
def fake_hub(monkeypatch):
    """Replace datasets.load_dataset with an in-memory hub; records every call."""
    import datasets

    calls: list[dict] = []
    hub: dict[tuple, list[dict]] = {}

    def load_dataset(path, name=None, split=None, **kwargs):
        calls.append({"path": path, "name": name, "split": split, **kwargs})
        splits = {s: datasets.Dataset.from_list(r) for (p, n, s), r in hub.items() if (p, n) == (path, name)}
        if not splits:
            raise FileNotFoundError(f"Dataset {path!r} ({name}) is not cached")
        return splits[split] if split else datasets.DatasetDict(splits)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    # the in-memory hub is the local cache too (an id it lacks fails before load_dataset is called)
    monkeypatch.setattr(
        "ares_cli.data.hub.is_cached", lambda repo_id, kind: any(p == repo_id for p, _, _ in hub)
    )
    return hub, calls


def _parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_gsm8k_answer_after_on_local_parquet(tmp_path):
    path = _parquet(tmp_path / "test-00000-of-00001.parquet", GSM_ROWS)
    loaded = load_problems(str(path), field_map="problem=question,answer_after=####,id=index")
    assert [r["answer"] for r in loaded] == ["7", "120", "2,500"]
    assert [r["id"] for r in loaded] == [
        "test-00000-of-00001-0",
        "test-00000-of-00001-1",
        "test-00000-of-00001-2",
    ]
    assert loaded.records[0]["problem"] == GSM_ROWS[0]["question"]
    assert loaded.provenance["kind"] == "file" and loaded.provenance["sha256"] == sha256_file(path)
    assert loaded.provenance["records_sha256"] == sha256_records(loaded.records)


def test_gsm8k_manifest_with_fake_hub(fake_hub, tmp_path, monkeypatch):
    hub, calls = fake_hub
    hub[("openai/gsm8k", "main", "test")] = GSM_ROWS
    with pytest.raises(InputErrors) as info:  # the shipped manifest expects 1319 rows
        load_problems("gsm8k")
    assert [e.field for e in info.value.errors] == ["expected_rows"]
    assert calls[-1] == {"path": "openai/gsm8k", "name": "main", "split": "test"}
    loaded = load_problems(
        "hf:openai/gsm8k:main@test", field_map="problem=question,answer_after=####,id=index"
    )
    assert [r["id"] for r in loaded] == ["gsm8k-0", "gsm8k-1", "gsm8k-2"]
    assert loaded.provenance["sha256"] == loaded.provenance["records_sha256"]


def test_missing_separator_names_row_and_field(tmp_path):
    rows = [*GSM_ROWS, {"question": "q", "answer": "no separator here"}]
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(InputErrors) as info:
        load_problems(
            str(path), field_map={"problem": "question", "answer_after": "####", "id_from": "index"}
        )
    [err] = info.value.errors
    assert (err.file, err.row, err.field) == (str(path), 4, "answer") and "'####'" in str(err)


def test_aime2025_concatenates_configs(fake_hub):
    hub, calls = fake_hub
    for part in ("I", "II"):
        hub[("opencompass/AIME2025", f"AIME2025-{part}", "test")] = [
            {"question": f"{part} problem {i}", "answer": str(100 + i)} for i in range(15)
        ]
    loaded = load_problems("aime2025")
    assert len(loaded) == 30
    assert [c["name"] for c in calls] == ["AIME2025-I", "AIME2025-II"] and {c["split"] for c in calls} == {
        "test"
    }
    assert loaded.records[0]["problem"] == "I problem 0" and loaded.records[15]["problem"] == "II problem 0"
    assert [r["id"] for r in loaded][:2] == ["aime2025-0", "aime2025-1"] and loaded.records[-1][
        "id"
    ] == "aime2025-29"
    assert {r["source"] for r in loaded} == {"aime2025"}
    prov = loaded.provenance
    assert prov["parts"] == [
        {"config": "AIME2025-I", "split": "test", "rows": 15},
        {"config": "AIME2025-II", "split": "test", "rows": 15},
    ]
    assert prov["kind"] == "manifest" and prov["path_or_id"] == "opencompass/AIME2025" and prov["rows"] == 30
    # the same through an hf: spec with '+' joined configs
    again = load_problems(
        "hf:opencompass/AIME2025:AIME2025-I+AIME2025-II@test", field_map="problem=question,id=index"
    )
    assert [r["problem"] for r in again] == [r["problem"] for r in loaded]


def test_amc23_float_answers_and_math500_meta(fake_hub):
    hub, _ = fake_hub
    hub[("zwhe99/amc23", None, "test")] = [
        {"id": i, "question": f"q{i}", "answer": a, "url": "u"}
        for i, a in enumerate([27.0, 0.5, 3.0] * 13 + [1.0])
    ]
    amc = load_problems("amc23")
    assert [r["answer"] for r in amc][:3] == ["27", "0.5", "3"] and len(amc) == 40
    hub[("HuggingFaceH4/MATH-500", None, "test")] = [
        {"problem": f"p{i}", "answer": "\\frac{1}{2}", "solution": "s", "subject": "Algebra", "level": 1 + i % 5,
         "unique_id": f"test/algebra/{i}.json"}
        for i in range(500)
    ]  # fmt: skip
    math = load_problems("math500", limit=2)
    assert math.records[1] == {
        "id": "test/algebra/1.json", "source": "math500", "problem": "p1", "answer": "\\frac{1}{2}",
        "meta": {"level": 2, "subject": "Algebra", "difficulty": 2},
    }  # fmt: skip


def test_hub_errors(fake_hub):
    hub, calls = fake_hub
    hub[("org/two", None, "train")] = [{"id": "a", "problem": "p", "answer": "1"}]
    hub[("org/two", None, "test")] = [{"id": "b", "problem": "p", "answer": "2"}]
    with pytest.raises(InputError, match=r"several splits \(train, test\)"):
        load_problems("org/two")
    assert [r["id"] for r in load_problems("org/two@test")] == ["b"]
    with pytest.raises(
        InputError, match="'org/absent' is not in the local Hugging Face cache and offline mode"
    ):
        load_problems("hf:org/absent")
    assert calls == [c for c in calls if c["path"] != "org/absent"]  # refused before any hub call


def test_parse_hf_spec():
    assert parse_hf_spec("hf:org/x") == ("org/x", (None,), None)
    assert parse_hf_spec("hf:org/x:main@test") == ("org/x", ("main",), "test")
    assert parse_hf_spec("org/x:A-I+A-II@train") == ("org/x", ("A-I", "A-II"), "train")


def test_local_dataset_directory(tmp_path):
    import datasets

    datasets.Dataset.from_list([{"id": 1, "problem": "p", "answer": 2.0}]).save_to_disk(str(tmp_path / "ds"))
    loaded = load_problems(str(tmp_path / "ds"))
    assert loaded.records == [{"id": "1", "source": "ds", "problem": "p", "answer": "2"}]


def test_json_array_and_identity_map(tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"id": "a", "problem": "p", "answer": 1, "source": "mine", "extra": 1}, 5]))
    with pytest.raises(InputErrors) as info:
        load_problems(str(path))
    assert [(e.row, e.field) for e in info.value.errors] == [(2, None)]
    path.write_text(json.dumps([{"id": "a", "problem": "p", "answer": 1, "source": "mine", "extra": 1}]))
    assert load_problems(str(path)).records == [{"id": "a", "source": "mine", "problem": "p", "answer": "1"}]


def test_missing_column_and_bad_inputs(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"q": "p", "a": "1"}\n{"q": "p2", "a": "2"}\n', encoding="utf-8")
    with pytest.raises(InputErrors) as info:
        load_problems(str(path), field_map="problem=q,answer=solution")
    assert {e.field for e in info.value.errors} == {"solution", "id"}
    assert "column 'solution' (for answer) not found in any row (columns: a, q)" in str(info.value)
    with pytest.raises(UsageError) as usage:
        load_problems(str(path), field_map="problme=q")
    assert usage.value.exit_code == EXIT_USAGE and "problme" in str(usage.value)
    with pytest.raises(InputError, match="file not found"):
        load_problems(str(tmp_path / "absent.jsonl"))
    with pytest.raises(InputError, match="unsupported file type"):
        csv = tmp_path / "x.csv"
        csv.write_text("a,b\n", encoding="utf-8")
        load_problems(str(csv))


def test_single_row_missing_column_and_empty_file(tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text('{"id": 1, "problem": "p"}\n', encoding="utf-8")
    with pytest.raises(InputErrors) as info:
        load_problems(str(path))
    assert [(e.file, e.row, e.field) for e in info.value.errors] == [(str(path), 1, "answer")]
    path.write_text("\n", encoding="utf-8")
    with pytest.raises(InputError, match="no rows"):
        load_problems(str(path))


def test_dotted_field_map_reads_nested_columns(tmp_path):
    """DAPO-Math-17K style rows: the problem inside a chat list, the answer inside a dict."""
    import json

    from ares_cli.data.loader import load_problems

    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {i}+1?"}],
            "reward_model": {"ground_truth": str(i + 1)},
        }
        for i in range(3)
    ]
    path = tmp_path / "dapo.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = load_problems(
        str(path), field_map="problem=prompt.0.content,answer=reward_model.ground_truth,id=index"
    )
    assert [r["problem"] for r in loaded.records] == ["What is 0+1?", "What is 1+1?", "What is 2+1?"]
    assert [r["answer"] for r in loaded.records] == ["1", "2", "3"]
