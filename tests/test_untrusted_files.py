"""Readers of untrusted files: FIFOs, directories, oversized files and deep JSON refused naming the file."""

from __future__ import annotations

import os

import pytest

from ares_cli.errors import InputError
from ares_cli.store.untrusted import (
    json_depth,
    load_json_bounded,
    parse_json_bounded,
    read_bounded,
    regular_file_size,
)


def test_regular_file_read_within_limit(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"a": [1, {"b": 2}]}')
    assert read_bounded(path, max_bytes=100) == path.read_bytes()
    assert load_json_bounded(path) == {"a": [1, {"b": 2}]}
    assert regular_file_size(path) == path.stat().st_size


@pytest.mark.timeout(10)
def test_fifo_refused_without_blocking(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO") as err:
        load_json_bounded(fifo)
    assert str(fifo) in str(err.value)


def test_directory_and_missing_refused(tmp_path):
    (tmp_path / "model.safetensors").mkdir()
    with pytest.raises(InputError, match="a directory, not a regular file"):
        read_bounded(tmp_path / "model.safetensors", max_bytes=10)
    with pytest.raises(InputError, match="not found"):
        read_bounded(tmp_path / "absent.json", max_bytes=10)


def test_oversized_sparse_file_refused_before_reading(tmp_path):
    path = tmp_path / "big.json"
    with path.open("wb") as fh:
        fh.truncate(8 * 1024**3)  # sparse: 8 GiB declared, nothing written
    with pytest.raises(InputError, match="over the 1,024-byte limit"):
        read_bounded(path, max_bytes=1024)


def test_json_depth_counted_and_bounded(tmp_path):
    assert json_depth(3) == 0
    assert json_depth([]) == 1
    assert json_depth({"a": [1, {"b": []}]}) == 4
    assert parse_json_bounded("[[[]]]", source="x", max_depth=3) == [[[]]]
    with pytest.raises(InputError, match="deeper than 2 levels"):
        parse_json_bounded("[[[]]]", source="x", max_depth=2)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="nests deeper"):
        load_json_bounded(deep)


def test_bad_json_and_non_finite_numbers_refused():
    with pytest.raises(InputError, match="not valid JSON"):
        parse_json_bounded("{", source="f.json")
    for literal in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(InputError, match="not a JSON number"):
            parse_json_bounded(f'{{"x": {literal}}}', source="f.json")
    with pytest.raises(InputError, match="not UTF-8"):
        parse_json_bounded(b"\xff\xfe{", source="f.json")
