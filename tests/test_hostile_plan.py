"""Hostile ``ares plan`` inputs (issue 34, parts 2-4), through the CLI: each is refused with its documented
exit code (2 for an impossible option value, 3 for bad input data), an ``error:`` line on stderr naming the
option, or the file and the field, and no traceback; the working inputs beside them still plan.

- ``--gpu-memory`` and ``--throughput`` as numbers: overflowing (``1e400``, ``1e309GiB``), non-finite,
  zero, negative, past the ranged limits, empty;
- ``--throughput`` from an artifact: its ``metrics.jsonl`` rows and its manifest's ``stats.world_size``,
  malformed, mistyped, non-finite, out of range, nested deeply, or not a regular file;
- DeepSpeed files: unparseable, nested deeply, non-finite, mistyped keys ares reads, not a regular file,
  and settings DeepSpeed's parser accepts but ares's AdamW cannot run with (a file that writes
  ``"zero_force_ds_cpu_optimizer": true`` beside optimizer offload);
- images inside parquet: a decompression bomb and other images refused from their header, never decoded.

Every call runs under an alarm: an input that blocks raises :class:`PlanInputHang` (the tally's ``hang``).
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
from hostile_plan_inputs import (  # noqa: F401  (PlanInputHang names the tally's hang)
    HANG_AFTER_S,
    REPO,
    SPECIAL_FILES,
    TOY,
    VL,
    ZERO2,
    PlanInputHang,
    _ares,
    _nested,
    _write,
    assert_refused,
    write_sft_data,
)


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory) -> Path:
    return write_sft_data(tmp_path_factory)


# --------------------------------------------------------------------------- --gpu-memory (exit 2)

GPU_MEMORY_BAD = [
    ("1e400", "positive finite"),  # float("1e400") is inf: int() of it raised OverflowError
    ("1e309GiB", "positive finite"),
    ("1e300TiB", "limit"),  # finite as a number, infinite in bytes
    ("2000TiB", "limit"),
    ("1e20", "limit"),
    ("inf", "expected a size"),
    ("nan", "expected a size"),
    ("-5GiB", "positive finite"),
    ("0", "positive finite"),
    ("0GiB", "positive finite"),
    ("0.1", "less than one byte"),
    ("", "expected a size"),
    ("GiB", "expected a size"),
    ("80XB", "expected a size"),
    ("80 GiB GiB", "expected a size"),
    ("0x50GiB", "expected a size"),
]


@pytest.mark.parametrize(("value", "words"), GPU_MEMORY_BAD, ids=[v or "empty" for v, _ in GPU_MEMORY_BAD])
def test_an_impossible_gpu_memory_is_a_usage_error(tmp_path, value, words):
    proc = _ares(tmp_path, "plan", "eval", "--model", TOY, "--suite", "toy", "--gpu-memory", value)
    assert_refused(proc, 2, "--gpu-memory", repr(value), words)


@pytest.mark.valid_input
@pytest.mark.parametrize(("value", "expected"), [("80GiB", 80 * 2**30), ("24GB", 24 * 10**9),
                                                 ("1.5e10", 15 * 10**9), (" 24 GiB ", 24 * 2**30)])  # fmt: skip
def test_a_gpu_memory_size_is_planned(tmp_path, value, expected):
    proc = _ares(tmp_path, "--json", "plan", "eval", "--model", TOY, "--suite", "toy", "--limit", "4",
                 "--gpu-memory", value)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["target"]["gpu_memory_bytes"] == expected


# --------------------------------------------------------------------------- --gpus / --nodes (exit 2)

RANKS_BAD = [("--gpus", "0"), ("--gpus", "-1"), ("--gpus", "1e3"), ("--gpus", "2000"), ("--nodes", "0"),
             ("--nodes", "100000"), ("--nodes", "inf")]  # fmt: skip


@pytest.mark.parametrize(("option", "value"), RANKS_BAD, ids=[f"{o}={v}" for o, v in RANKS_BAD])
def test_an_impossible_rank_count_is_a_usage_error(tmp_path, option, value):
    proc = _ares(tmp_path, "plan", "eval", "--model", TOY, "--suite", "toy", option, value)
    assert_refused(proc, 2, option)


# --------------------------------------------------------------------------- --throughput as a number

THROUGHPUT_BAD = [
    ("inf", "expected a positive number"),
    ("-inf", "expected a positive number"),
    ("Infinity", "expected a positive number"),
    ("nan", "expected a positive number"),
    ("1e400", "finite"),
    ("-5", "must be > 0"),
    ("0", "must be > 0"),
    ("0.0", "must be > 0"),
    ("2e9", "at most"),
    ("", "empty"),
    ("   ", "empty"),
]


@pytest.mark.parametrize(
    ("value", "words"), THROUGHPUT_BAD, ids=[v.strip() or "blank" for v, _ in THROUGHPUT_BAD]
)
def test_an_impossible_throughput_is_a_usage_error(tmp_path, value, words):
    proc = _ares(tmp_path, "plan", "eval", "--model", TOY, "--suite", "toy", "--throughput", value)
    assert_refused(proc, 2, "--throughput", words)


@pytest.mark.parametrize("value", ["0x10", "1_000", "fast"])
def test_a_throughput_that_is_no_number_and_no_artifact_is_bad_input(tmp_path, value):
    proc = _ares(tmp_path, "plan", "eval", "--model", TOY, "--suite", "toy", "--throughput", value)
    assert_refused(proc, 3, "--throughput", repr(value), "neither a number")


# --------------------------------------------------------------------------- --throughput from an artifact

GOOD_ROWS = [{"step": 1, "tokens_per_s": 1000.0}, {"step": 2, "tokens_per_s": 3000.0}]
GOOD_MANIFEST = {"stage": "rl", "stats": {"world_size": 2}}


def _rows(*rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


METRICS_BAD = [  # (id, metrics.jsonl text, the words stderr must hold besides the file)
    ("malformed row", _rows("{not json", *GOOD_ROWS), ["row 1", "not valid JSON"]),
    ("row is a list", _rows([1, 2], *GOOD_ROWS), ["row 1", "must be an object"]),
    ("row is a string", _rows('"tokens"', *GOOD_ROWS), ["row 1", "must be an object"]),
    ("row is null", _rows("null", *GOOD_ROWS), ["row 1", "must be an object"]),
    ("rate is a string", _rows({"tokens_per_s": "fast"}, *GOOD_ROWS), ["row 1", "field 'tokens_per_s'"]),
    ("rate is a boolean", _rows({"tokens_per_s": True}, *GOOD_ROWS), ["row 1", "field 'tokens_per_s'"]),
    ("rate is a list", _rows({"tokens_per_s": [1]}, *GOOD_ROWS), ["row 1", "field 'tokens_per_s'"]),
    ("rate is null", _rows({"tokens_per_s": None}, *GOOD_ROWS), ["row 1", "field 'tokens_per_s'"]),
    ("rate is negative", _rows(*GOOD_ROWS, {"tokens_per_s": -5}, GOOD_ROWS[0]), ["row 3", "field 'tokens_per_s'"]),
    ("rate is NaN", _rows('{"tokens_per_s": NaN}', *GOOD_ROWS), ["row 1", "NaN"]),
    ("rate is Infinity", _rows('{"tokens_per_s": Infinity}', *GOOD_ROWS), ["row 1", "Infinity"]),
    ("rate is 1e400", _rows('{"tokens_per_s": 1e400}', *GOOD_ROWS), ["row 1", "field 'tokens_per_s'", "finite"]),
    ("rate is 10**400", _rows('{"tokens_per_s": 1' + "0" * 400 + "}", *GOOD_ROWS), ["row 1", "field 'tokens_per_s'"]),
    ("rate is 1e12", _rows({"tokens_per_s": 1e12}, *GOOD_ROWS), ["row 1", "field 'tokens_per_s'", "at most"]),
    ("row nested deeply", _rows(_nested(5000), *GOOD_ROWS), ["row 1", "nests deeper"]),
    ("no rate at all", _rows({"step": 1}, {"step": 2}), ["no step with tokens_per_s"]),
    ("only zero rates", _rows({"tokens_per_s": 0}, {"tokens_per_s": 0.0}), ["no step with tokens_per_s"]),
    ("empty file", "", ["no step with tokens_per_s"]),
    ("not UTF-8", "\udcff", ["not UTF-8"]),
]  # fmt: skip

MANIFEST_BAD = [  # (id, manifest.json text, words)
    ("malformed JSON", '{"stats": {"world_size": 2}', ["not valid JSON"]),
    ("a list", "[1, 2]", ["must be an object"]),
    ("a string", '"rl"', ["must be an object"]),
    ("stats a list", json.dumps({"stats": [2]}), ["field 'stats'", "must be an object"]),
    ("stats a string", json.dumps({"stats": "world_size=2"}), ["field 'stats'"]),
    ("world size a string", json.dumps({"stats": {"world_size": "2"}}), ["field 'stats.world_size'", "integer"]),
    ("world size zero", json.dumps({"stats": {"world_size": 0}}), ["field 'stats.world_size'", ">= 1"]),
    ("world size negative", json.dumps({"stats": {"world_size": -2}}), ["field 'stats.world_size'", ">= 1"]),
    ("world size fractional", json.dumps({"stats": {"world_size": 2.5}}), ["field 'stats.world_size'", "integer"]),
    ("world size a boolean", json.dumps({"stats": {"world_size": True}}), ["field 'stats.world_size'"]),
    ("world size null", json.dumps({"stats": {"world_size": None}}), ["field 'stats.world_size'"]),
    ("world size 1e400", '{"stats": {"world_size": 1e400}}', ["field 'stats.world_size'", "finite"]),
    ("world size 2**60", json.dumps({"stats": {"world_size": 2**60}}), ["field 'stats.world_size'", "at most"]),
    ("world size NaN", '{"stats": {"world_size": NaN}}', ["NaN"]),
    ("nested deeply", '{"stats": ' + _nested(5000) + "}", ["nests deeper"]),
]  # fmt: skip


def _artifact(directory: Path, metrics: str | None = None, manifest: str | None = None) -> Path:
    directory.mkdir(parents=True)
    if metrics is not None:
        (directory / "metrics.jsonl").write_bytes(metrics.encode("utf-8", "surrogateescape"))
    if manifest is not None:
        (directory / "manifest.json").write_text(manifest)
    return directory


@pytest.mark.parametrize(("case", "metrics", "words"), METRICS_BAD, ids=[c[0] for c in METRICS_BAD])
def test_a_throughput_artifacts_bad_metrics_are_refused(tmp_path, case, metrics, words):
    run = _artifact(tmp_path / "rl-run", metrics, json.dumps(GOOD_MANIFEST))
    proc = _ares(tmp_path / "art", "plan", "eval", "--model", TOY, "--suite", "toy", "--throughput", str(run))
    assert_refused(proc, 3, "--throughput", str(run / "metrics.jsonl"), *words)


@pytest.mark.parametrize(("case", "manifest", "words"), MANIFEST_BAD, ids=[c[0] for c in MANIFEST_BAD])
def test_a_throughput_artifacts_bad_manifest_is_refused(tmp_path, case, manifest, words):
    run = _artifact(tmp_path / "rl-run", _rows(*GOOD_ROWS), manifest)
    proc = _ares(tmp_path / "art", "plan", "eval", "--model", TOY, "--suite", "toy", "--throughput", str(run))
    assert_refused(proc, 3, "--throughput", str(run / "manifest.json"), *words)


@pytest.mark.parametrize("name", ["metrics.jsonl", "manifest.json"])
@pytest.mark.parametrize(("case", "make", "words"), SPECIAL_FILES, ids=[c[0] for c in SPECIAL_FILES])
def test_a_throughput_artifact_file_that_is_not_a_regular_file_is_refused(tmp_path, name, case, make, words):
    run = _artifact(tmp_path / "rl-run", None if name == "metrics.jsonl" else _rows(*GOOD_ROWS))
    make(run / name)
    proc = _ares(tmp_path / "art", "plan", "eval", "--model", TOY, "--suite", "toy", "--throughput", str(run))
    assert_refused(proc, 3, "--throughput", str(run / name), words)


@pytest.mark.valid_input
def test_a_throughput_artifact_gives_its_median_per_gpu(tmp_path):
    """The median of the logged rates over the manifest's ranks; a step that logged 0 tokens/s and a torn
    last row (a killed run's last write) are left out."""
    rows = _rows({"tokens_per_s": 0}, *GOOD_ROWS, {"tokens_per_s": 5000.0}) + '{"tokens_per'
    run = _artifact(tmp_path / "rl-run", rows, json.dumps(GOOD_MANIFEST))
    proc = _ares(tmp_path / "art", "--json", "plan", "eval", "--model", TOY, "--suite", "toy", "--limit", "4",
                 "--throughput", str(run))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    target = json.loads(proc.stdout)["target"]
    assert target["throughput_tokens_per_s_per_gpu"] == 3000.0 / 2
    assert "median of 3 steps" in target["throughput_source"]


@pytest.mark.valid_input
@pytest.mark.parametrize(("value", "expected"), [("2000", 2000.0), ("1.5e3", 1500.0), ("+750", 750.0)])
def test_a_throughput_number_is_planned(tmp_path, value, expected):
    proc = _ares(tmp_path, "--json", "plan", "eval", "--model", TOY, "--suite", "toy", "--limit", "4",
                 "--throughput", value)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["target"]["throughput_tokens_per_s_per_gpu"] == expected


# --------------------------------------------------------------------------- images inside parquet (exit 3)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` RGB pixels (its data is one byte: a decoder that
    trusted the header would allocate width x height x 3 bytes first)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(b"\0"))
        + _chunk(b"IEND", b"")
    )


def _small_png() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


PARQUET_IMAGES_BAD = [  # (id, the image struct's bytes, words)
    ("decompression bomb", png_header(100_000, 100_000), "too large to decode safely"),
    ("past ares's pixel limit", png_header(12_000, 12_000), "pixel limit"),  # under PIL's error, over its warning
    ("too elongated", png_header(30_000, 10), "aspect ratio"),
    ("not an image", b"GIF but not really", "not a readable image"),
    ("a truncated header", png_header(64, 64)[:20], "not a readable image"),
]  # fmt: skip


def _parquet_manifest(directory: Path, image) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"p{i}", "source": "toy", "problem": "Start at 3, then +4.", "answer": "7",
             "images": [{"bytes": image if i == 1 else _small_png(), "path": None}]} for i in (1, 2)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), directory / "images.parquet")
    manifest = directory / "images.yaml"
    manifest.write_text("name: images\ndescription: problems with images from parquet\n"
                        "source:\n  local: {path: images.parquet}\nlicence: test\n")  # fmt: skip
    return manifest


@pytest.mark.parametrize(
    ("case", "image", "words"), PARQUET_IMAGES_BAD, ids=[c[0] for c in PARQUET_IMAGES_BAD]
)
def test_an_image_in_parquet_is_refused_from_its_header(tmp_path, monkeypatch, case, image, words):
    monkeypatch.setenv("ARES_IMAGE_CACHE", str(tmp_path / "image-cache"))
    manifest = _parquet_manifest(tmp_path / "data", image)
    proc = _ares(tmp_path / "art", "plan", "rl", "--model", VL, "--data", str(manifest),
                 "--set", "rollout.max_new_tokens=64")  # fmt: skip
    assert_refused(proc, 3, "plan rl: data", "images.parquet, row 1, field 'images'", words)
    cached = list((tmp_path / "image-cache").iterdir()) if (tmp_path / "image-cache").exists() else []
    assert all(p.read_bytes() != image for p in cached)  # the refused bytes never reach the cache


@pytest.mark.valid_input
def test_small_images_in_parquet_are_planned(tmp_path, monkeypatch):
    monkeypatch.setenv("ARES_IMAGE_CACHE", str(tmp_path / "image-cache"))
    manifest = _parquet_manifest(tmp_path / "data", _small_png())
    proc = _ares(tmp_path / "art", "--json", "plan", "rl", "--model", VL, "--data", str(manifest),
                 "--set", "rollout.max_new_tokens=64")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(list((tmp_path / "image-cache").iterdir())) == 1  # both rows' image, stored once


# --------------------------------------------------------------------------- a refused plan on stderr


@pytest.mark.parametrize("json_output", [False, True], ids=["tables", "json"])
def test_a_refused_plan_names_its_failures_on_stderr(tmp_path, json_output):
    missing = tmp_path / "missing.jsonl"
    proc = _ares(tmp_path / "art", *(["--json"] if json_output else []), "plan", "sft", "--model", TOY,
                 "--data", str(missing))  # fmt: skip
    assert_refused(proc, 3, "plan sft: data", str(missing))
    if json_output:  # the report stays on stdout, whole
        report = json.loads(proc.stdout)
        assert report["exit_code"] == 3 and "error:" not in proc.stdout


def test_a_plan_that_will_not_fit_says_why_on_stderr(tmp_path, sft_data):
    proc = _ares(
        tmp_path / "art", "plan", "sft", "--model", TOY, "--data", str(sft_data), "--gpu-memory", "1MiB"
    )
    assert proc.returncode == 5, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "error: plan sft: will not fit" in proc.stderr


# --------------------------------------------------------------------------- the hang guard itself


@pytest.mark.valid_input
def test_a_call_that_blocks_is_stopped_and_counted_as_a_hang(monkeypatch, tmp_path):
    import time

    import hostile_plan_inputs
    import hostile_tally

    monkeypatch.setattr(hostile_plan_inputs, "HANG_AFTER_S", 1)
    import cli_runner

    monkeypatch.setattr(cli_runner, "invoke_in_process", lambda args: time.sleep(30))
    started = time.monotonic()
    with pytest.raises(PlanInputHang) as stopped:
        _ares(tmp_path, "plan", "sft")
    assert time.monotonic() - started < 10
    call = {"exception": f"PlanInputHang: {stopped.value}", "output": "", "traceback": True, "exit_code": 1}
    assert hostile_tally.classify(call, False) == "hang"
    assert hostile_tally.classify({**call, "exception": "ValueError: x"}, False) == "traceback"
