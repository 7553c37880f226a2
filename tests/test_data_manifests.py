"""Dataset manifests: shipped ones parse, lookup, schema errors, local sources with field maps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ares_cli
from ares_cli.data.loader import load_problems
from ares_cli.data.manifests import (
    HFSource,
    LocalSource,
    find_manifest,
    list_manifests,
    load_manifest,
    parse_manifest,
)
from ares_cli.errors import EXIT_INPUT, InputError, InputErrors

REPO_MANIFESTS = Path(ares_cli.__file__).resolve().parents[1] / "data_manifests"
SHIPPED = ["aime2024", "aime2025", "amc23", "gsm8k", "math500", "toy-test", "toy-train", "toy-val"]


@pytest.fixture(autouse=True)
def _no_extra_dirs(monkeypatch):
    monkeypatch.delenv("ARES_MANIFESTS", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def test_every_shipped_manifest_parses():
    files = sorted(REPO_MANIFESTS.glob("*.yaml"))
    assert {f.stem for f in files} >= set(SHIPPED)
    for path in files:
        m = parse_manifest(path)
        assert m.name == path.stem and m.licence and m.description
    assert set(SHIPPED) <= set(list_manifests())


def test_shipped_manifest_details():
    aime25 = load_manifest("aime2025")
    assert isinstance(aime25.source, HFSource)
    assert aime25.source.configs == ("AIME2025-I", "AIME2025-II") and aime25.source.split == "test"
    assert aime25.expected_rows == 30 and aime25.field_map.problem == "question"
    gsm = load_manifest("gsm8k")
    assert (
        gsm.field_map.answer_after == "####" and gsm.source.configs == ("main",) and gsm.expected_rows == 1319
    )
    assert "MIT" in gsm.licence and "MAA" in load_manifest("amc23").licence
    math = load_manifest("math500")
    assert math.field_map.id_from == "unique_id" and math.field_map.difficulty == "level"
    assert math.field_map.meta == {"level": "level", "subject": "subject"}
    toy = load_manifest("toy-train")
    assert isinstance(toy.source, LocalSource)
    assert toy.source.path == Path(ares_cli.__file__).resolve().parent / "toy" / "data" / "train.jsonl"


@pytest.mark.parametrize(("name", "rows"), [("toy-train", 2000), ("toy-val", 200), ("toy-test", 400)])
def test_toy_manifests_load(name, rows):
    loaded = load_problems(name)
    assert len(loaded) == rows == loaded.provenance["rows"]
    assert {r["source"] for r in loaded} == {"toy"}
    assert all(isinstance(r["meta"]["difficulty"], int) for r in loaded)
    assert loaded.provenance["kind"] == "manifest" and len(loaded.provenance["sha256"]) == 64


def test_unknown_manifest_lists_known_ones():
    with pytest.raises(InputError) as info:
        find_manifest("math5000")
    msg = str(info.value)
    assert "math5000" in msg and all(name in msg for name in SHIPPED)
    with pytest.raises(InputError) as via_loader:
        load_problems("gsm9k")
    assert "known manifests" in str(via_loader.value) and "gsm8k" in str(via_loader.value)
    assert via_loader.value.exit_code == EXIT_INPUT


def _write_manifest(directory: Path, name: str, body: dict) -> Path:
    import yaml

    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, **body}), encoding="utf-8")
    return path


def test_local_manifest_with_field_map_via_env(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"question": f"q{i}", "solution": str(i * 2), "lvl": i % 3, "tag": "t"} for i in range(5)]
    (data / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    mdir = tmp_path / "manifests"
    mdir.mkdir()
    _write_manifest(mdir, "mine", {
        "description": "d", "licence": "CC0", "expected_rows": 5, "source_label": "mine-src",
        "source": {"local": {"path": "../data/mine.jsonl"}},
        "field_map": {"problem": "question", "answer": "solution", "id_from": "index", "meta": ["tag"]},
        "difficulty_field": "lvl",
    })  # fmt: skip
    monkeypatch.setenv("ARES_MANIFESTS", str(mdir))
    assert "mine" in list_manifests()
    loaded = load_problems("mine", limit=3)
    assert loaded.records[2] == {
        "id": "mine-2", "source": "mine-src", "problem": "q2", "answer": "4", "meta": {"tag": "t", "difficulty": 2},
    }  # fmt: skip
    assert len(loaded) == 3 and loaded.provenance["total_rows"] == 5 and loaded.provenance["limit"] == 3
    from ares_cli.store.hashing import sha256_file

    assert loaded.provenance["sha256"] == sha256_file(data / "mine.jsonl")
    # the manifest's field map can be overridden from the command line
    over = load_problems("mine", field_map="answer=question")
    assert over.records[0]["answer"] == "q0"


def test_expected_rows_mismatch(tmp_path, monkeypatch):
    (tmp_path / "d.jsonl").write_text('{"id": "a", "problem": "p", "answer": "1"}\n', encoding="utf-8")
    path = _write_manifest(tmp_path, "short", {
        "description": "d", "licence": "MIT", "expected_rows": 3, "source": {"local": {"path": "d.jsonl"}},
    })  # fmt: skip
    with pytest.raises(InputErrors) as info:
        load_problems(str(path))
    [err] = info.value.errors
    assert err.field == "expected_rows" and err.file == str(path)
    assert "1 rows" in str(err) and "expects 3" in str(err)


def test_manifest_schema_errors_name_file_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: other\nlicence: 3\nexpected_rows: -1\nsurprise: 1\n"
        "source: {hf: {id: a/b, split: test, config: [1]}, local: {path: x.jsonl}}\n"
        "field_map: {problm: q}\n",
        encoding="utf-8",
    )
    with pytest.raises(InputErrors) as info:
        parse_manifest(path)
    fields = {e.field for e in info.value.errors}
    assert fields == {"surprise", "name", "description", "licence", "expected_rows", "source", "field_map"}
    assert all(e.file == str(path) for e in info.value.errors)
    path.write_text("name: bad\ndescription: d\nlicence: x\nsource: {hf: {id: a/b}}\n", encoding="utf-8")
    with pytest.raises(InputErrors) as info:
        parse_manifest(path)
    assert [e.field for e in info.value.errors] == ["source.hf.split"]
    path.write_text("- a list\n", encoding="utf-8")
    with pytest.raises(InputError, match="YAML mapping"):
        parse_manifest(path)
