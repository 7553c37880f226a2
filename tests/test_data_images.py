"""Images in problem records: path resolution, HF image columns, decoding checks, content hashes."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from ares_cli.data.images import hashable_records, inspect_images
from ares_cli.data.loader import load_problems
from ares_cli.errors import EXIT_INPUT, InputErrors
from ares_cli.stages.inputs import dataset_ref

Image = pytest.importorskip("PIL.Image")


def _png(path, size=(30, 20), color=(200, 10, 10)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def _dataset(tmp_path, images_per_row):
    rows = [
        {"id": f"p{i}", "source": "vis", "problem": f"what is shown {i}?", "answer": str(i), "images": imgs}
        for i, imgs in enumerate(images_per_row)
    ]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _check(path):
    from ares_cli.main import app

    return CliRunner().invoke(app, ["data", "check", str(path), "--json"])


@pytest.fixture
def image_dataset(tmp_path):
    _png(tmp_path / "img" / "a.png", (30, 20))
    _png(tmp_path / "img" / "b.png", (56, 44))
    return _dataset(tmp_path, [["img/a.png"], ["img/a.png", "img/b.png"], []])


def test_relative_paths_resolve_against_the_dataset_file(image_dataset, tmp_path):
    loaded = load_problems(str(image_dataset))
    assert loaded.records[0]["images"] == [str(tmp_path / "img" / "a.png")]
    assert loaded.records[1]["images"][1] == str(tmp_path / "img" / "b.png")
    assert "images" not in loaded.records[2] or loaded.records[2]["images"] == []


def test_data_check_reports_counts_and_sizes(image_dataset):
    result = _check(image_dataset)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    stats = summary["image_stats"]
    assert stats["images"] == 3 and stats["records_with_images"] == 2
    assert stats["width"] == {"min": 30, "max": 56} and stats["height"] == {"min": 20, "max": 44}
    assert stats["per_record"] == {"min": 1, "max": 2}


def _errors(path):
    from ares_cli.commands import data as data_cmd

    result = CliRunner().invoke(data_cmd.app, ["check", str(path)])
    assert isinstance(result.exception, InputErrors), result.output
    return result.exception


def test_missing_and_empty_images_exit_3_naming_row_and_field(tmp_path):
    _png(tmp_path / "ok.png")
    (tmp_path / "empty.png").write_bytes(b"")
    path = _dataset(tmp_path, [["ok.png"], ["missing.png"], ["ok.png", "empty.png"]])
    result = _check(path)
    assert result.exit_code == EXIT_INPUT
    err = _errors(path)
    assert {(e.file, e.row, e.field) for e in err.errors} == {
        (str(path), 2, "images"),
        (str(path), 3, "images"),
    }
    assert "image not found" in str(err) and "missing.png" in str(err)
    assert "zero-size image" in str(err) and "empty.png" in str(err)


def test_corrupt_image_alone_exits_3(tmp_path):
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    path = _dataset(tmp_path, [["bad.png"]])
    assert _check(path).exit_code == EXIT_INPUT
    err = _errors(path)
    assert {(e.file, e.row, e.field) for e in err.errors} == {(str(path), 1, "images")}
    assert "cannot decode image" in str(err) and "bad.png" in str(err)


def test_hf_image_column_mapped_by_a_manifest(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("ARES_IMAGE_CACHE", str(tmp_path / "cache"))
    img = Image.new("RGB", (28, 28), (0, 0, 255))
    features = datasets.Features(
        {"question": datasets.Value("string"), "answer": datasets.Value("string"), "image": datasets.Image()}
    )
    ds = datasets.Dataset.from_dict(
        {"question": ["color?"], "answer": ["blue"], "image": [img]}, features=features
    )
    datasets.DatasetDict({"test": ds}).save_to_disk(str(tmp_path / "ds"))
    manifest = tmp_path / "vis.yaml"
    manifest.write_text(
        f"name: vis\ndescription: one image\nsource: {{hf: {{id: {tmp_path / 'ds'}, split: test}}}}\nlicence: test\n"
        "field_map: {problem: question, answer: answer, images: image, id_from: index}\n"
    )
    loaded = load_problems(str(manifest))
    (path,) = loaded.records[0]["images"]
    assert path.startswith(str(tmp_path / "cache"))
    with Image.open(path) as back:
        assert back.size == (28, 28) and back.convert("RGB").getpixel((3, 3)) == (0, 0, 255)
    summary, errors = inspect_images(loaded.records, loaded.locations)
    assert not errors and summary["images"] == 1


def test_image_bytes_are_part_of_the_dataset_hash(image_dataset, tmp_path):
    loaded = load_problems(str(image_dataset))
    before = dataset_ref(loaded.records, loaded.provenance).sha256
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "img", moved / "img")
    shutil.copy(image_dataset, moved / "data.jsonl")
    relocated = load_problems(str(moved / "data.jsonl"))
    assert dataset_ref(relocated.records, relocated.provenance).sha256 == before  # paths do not count
    _png(tmp_path / "img" / "b.png", (56, 44), color=(1, 2, 3))  # same size, other bytes
    assert dataset_ref(loaded.records, loaded.provenance).sha256 != before


def test_text_records_hash_as_before():
    records = [{"id": "a", "source": "s", "problem": "p", "answer": "1"}]
    assert hashable_records(records) == records
