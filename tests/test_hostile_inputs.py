"""Hostile and careless inputs to the stages, through the CLI, grouped by surface: seeds, images, files,
chat records, trackers, multiple-choice golds, replayed samples, manifests.

Each case exits with its documented code (2 usage, 3 invalid input) and a message naming the file, row and
field, before a model loads or a stage opens its partial directory (checked: none is left behind).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from input_rows import one_plus_one as _problem
from input_rows import write_jsonl as _jsonl
from typer.testing import CliRunner

from ares_cli.main import app

REPO = Path(__file__).resolve().parents[1]
TOY, TOY_VL = REPO / "ares_cli" / "toy" / "base", REPO / "ares_cli" / "toy" / "vl_base"


def _png_header_claiming(path: Path, width: int, height: int) -> Path:
    """A small PNG whose header claims ``width`` x ``height`` (a decompression bomb's header, few bytes)."""
    from PIL import Image

    Image.new("RGB", (8, 8), (200, 10, 10)).save(path)
    data = bytearray(path.read_bytes())
    ihdr = bytearray(data[16:29])
    ihdr[0:8] = struct.pack(">II", width, height)
    data[16:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + bytes(ihdr)) & 0xFFFFFFFF)
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    from PIL import Image

    tmp = tmp_path_factory.mktemp("hostile")
    _png_header_claiming(tmp / "bomb.png", 20000, 20000)  # 400 M pixels
    Image.new("RGB", (2000, 5)).save(tmp / "wide.png")  # aspect ratio 400
    Image.new("RGB", (64, 64)).save(tmp / "ok.png")
    (tmp / "latin1.yaml").write_bytes("name: latin1\ndescription: caf\xe9\n".encode("latin-1"))
    (tmp / "empty-dir").mkdir()
    (tmp / "mixed-dir").mkdir()
    _jsonl(tmp / "mixed-dir" / "a.jsonl", [_problem("m1")])
    (tmp / "mixed-dir" / "b.jsonl").write_bytes(b"\x00\xff not json")
    (tmp / "jsonl-dir").mkdir()
    for part in ("a", "b"):
        _jsonl(tmp / "jsonl-dir" / f"{part}.jsonl", [_problem(f"{part}{i}") for i in range(2)])
    manifests = tmp / "manifests"
    manifests.mkdir()
    (manifests / "latin1.yaml").write_bytes((tmp / "latin1.yaml").read_bytes())
    pickled = tmp / "pickled-model"
    pickled.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (pickled / name).write_bytes((TOY / name).read_bytes())
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")  # a pickle: never opened
    options = ["red", "green", "blue", "gray"]

    def image_rows(name: str) -> list[dict]:
        return [
            _problem(f"v{i}", problem="<image> what?", images=[name if i == 1 else "ok.png"])
            for i in range(3)
        ]

    return {
        "tmp": tmp,
        "empty_dir": tmp / "empty-dir",
        "mixed_dir": tmp / "mixed-dir",
        "jsonl_dir": tmp / "jsonl-dir",
        "data": _jsonl(tmp / "problems.jsonl", [_problem("p1"), _problem("p2")]),
        "bomb": _jsonl(tmp / "bomb.jsonl", image_rows("bomb.png")),
        "wide": _jsonl(tmp / "wide.jsonl", image_rows("wide.png")),
        "sft_wide": _jsonl(tmp / "sft_wide.jsonl", [{"prompt": "<image> q", "response": "a", "images": ["wide.png"]}]),
        "sft_bomb": _jsonl(tmp / "sft_bomb.jsonl", [{"prompt": "<image> q", "response": "a", "images": ["bomb.png"]}]),
        "singular": _jsonl(tmp / "singular.jsonl", [_problem("s1", image="ok.png")]),
        "bytes_text": _jsonl(tmp / "bytes_text.jsonl", [_problem("b1", images=[{"bytes": "aGVsbG8="}])]),
        "not_image": _jsonl(tmp / "not_image.jsonl", [_problem("n1", images=[{"path": "problems.jsonl"}])]),
        "latin1": tmp / "latin1.yaml",
        "manifests": manifests,
        "pickled": pickled,
        "int_role": _jsonl(tmp / "int_role.jsonl", [{"messages": [{"role": 1, "content": "q"},
                                                                   {"role": "assistant", "content": "a"}]}]),
        "wizard": _jsonl(tmp / "wizard.jsonl", [{"messages": [{"role": "wizard", "content": "q"},
                                                              {"role": "assistant", "content": "a"}]}]),
        "mc_one_bad": _jsonl(tmp / "mc_one_bad.jsonl", [
            _problem(f"c{i}", answer="B" if i != 7 else "Q", meta={"options": options}) for i in range(20)]),
        "mc_all_bad": _jsonl(tmp / "mc_all_bad.jsonl", [
            _problem(f"c{i}", answer="purple", meta={"options": options}) for i in range(4)]),
        "mc30": _jsonl(tmp / "mc30.jsonl", [_problem("c30", answer="opt29", meta={"options": [f"opt{i}" for i in range(30)]})]),
        "mc30_samples": _jsonl(tmp / "mc30_samples.jsonl", [{"problem_id": "c30", "sample_idx": 0, "response": "\\boxed{opt29}"}]),
        "three": _jsonl(tmp / "three.jsonl", [_problem(f"p{i}") for i in (1, 2, 3)]),
        "samples_unknown": _jsonl(tmp / "samples_unknown.jsonl", [
            {"problem_id": pid, "sample_idx": 0, "response": "\\boxed{2}"} for pid in ("p1", "p2", "p3", "ghost")]),
        "samples_missing": _jsonl(tmp / "samples_missing.jsonl", [
            {"problem_id": pid, "sample_idx": 0, "response": "\\boxed{2}"} for pid in ("p1", "p2")]),
        "samples_bad_row": _jsonl(tmp / "samples_bad_row.jsonl", [
            {"problem_id": "p1", "sample_idx": 0, "response": "\\boxed{2}"}, {"problem_id": "p2", "sample_idx": "x"},
            {"problem_id": "p3", "sample_idx": 0, "response": "\\boxed{2}"}]),
    }  # fmt: skip


def _invoke(root: Path, argv: list[str], env: dict | None = None):
    result = CliRunner().invoke(app, ["--artifacts-root", str(root), *argv], env=env)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    return result.exit_code, " ".join(result.output.split())


def _run_case(tmp_path, files, argv, code, fragments, env=None):
    root = tmp_path / "artifacts"
    got, text = _invoke(root, [a.format(**files, toy=TOY, toy_vl=TOY_VL) for a in argv], env)
    assert got == code, text
    for fragment in fragments:
        assert fragment.format(**files) in text, text
    assert not list(root.glob("*/*.partial")) if root.exists() else True


SEED_RANGE = "is out of range (must be >= 0, <= 4294967295)"
SEEDS = [
    ("passrate-negative", ["passrate", "--data", "{data}", "--model", "m", "--seed", "-1"], ["'seed': -1"]),
    ("passrate-2^32", ["passrate", "--data", "{data}", "--model", "m", "--seed", "4294967296"], ["'seed': 4294967296"]),
    ("eval-negative", ["eval", "--data", "{data}", "--model", "m", "--seed", "-3"], ["'seed': -3"]),
    ("sft-negative", ["sft", "--data", "{data}", "--model", "m", "--set", "seed=-5"], ["'seed': -5"]),
    ("rl-huge", ["rl", "--data", "{data}", "--model", "m", "--set", "seed=99999999999"], ["'seed': 99999999999"]),
    ("curate-negative", ["curate", "--passrates", "{data}", "--seed", "-1"], ["'seed': -1"]),
    ("toy-init-negative", ["toy", "init", "--seed", "-1"], ["'seed': -1"]),
    ("toy-init-vision-2^32", ["toy", "init", "--vision", "--seed", "4294967296"], ["'seed': 4294967296"]),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "fragments"), [c[1:] for c in SEEDS], ids=[c[0] for c in SEEDS])
def test_every_seed_has_one_range(tmp_path, files, argv, fragments):
    _run_case(tmp_path, files, argv, 2, [*fragments, SEED_RANGE])


BOMB = "image is too large to decode safely"
WIDE = "image is 2000x5: aspect ratio 400 is over the processor's limit of 200"
IMAGES = [
    ("data-check-bomb", ["data", "check", "{bomb}"], 3, ["bomb.jsonl, row 2, field 'images'", BOMB]),
    ("passrate-bomb", ["passrate", "--data", "{bomb}", "--model", "{toy_vl}", "-k", "1"], 3,
     ["bomb.jsonl, row 2, field 'images'", BOMB]),
    ("data-check-wide", ["data", "check", "{wide}"], 3, ["wide.jsonl, row 2, field 'images'", WIDE]),
    ("passrate-wide", ["passrate", "--data", "{wide}", "--model", "{toy_vl}", "-k", "1"], 3,
     ["wide.jsonl, row 2, field 'images'", WIDE]),
    ("sft-wide", ["sft", "--data", "{sft_wide}", "--model", "{toy_vl}", "--max-steps", "1"], 3,
     ["sft_wide.jsonl, row 1, field 'images'", WIDE]),
    ("sft-bomb", ["sft", "--data", "{sft_bomb}", "--model", "{toy_vl}", "--max-steps", "1"], 3,
     ["sft_bomb.jsonl, row 1, field 'images'", BOMB]),
    ("rl-wide", ["rl", "--data", "{wide}", "--model", "{toy_vl}"], 3, ["wide.jsonl, row 2, field 'images'", WIDE]),
    ("sft-min-pixels-zero", ["sft", "--data", "{sft_wide}", "--model", "m", "--set", "min_pixels=0"], 2,
     ["config key 'min_pixels': 0 is out of range (must be >= 1)"]),
    ("sft-max-pixels-negative", ["sft", "--data", "{sft_wide}", "--model", "m", "--set", "max_pixels=-5"], 2,
     ["config key 'max_pixels': -5 is out of range (must be >= 1)"]),
    ("rl-min-above-max",
     ["rl", "--data", "{wide}", "--model", "m", "--set", "rollout.min_pixels=5000", "--set", "rollout.max_pixels=4000"],
     2, ["'rollout.min_pixels' 5000 is above 'rollout.max_pixels' 4000"]),
    ("passrate-min-above-max",
     ["passrate", "--data", "{wide}", "--model", "m", "--set", "min_pixels=5000", "--set", "max_pixels=4000"], 2,
     ["'min_pixels' 5000 is above 'max_pixels' 4000"]),
    ("image-singular", ["data", "check", "{singular}"], 3,
     ["singular.jsonl, row 1, field 'image'", "a record's images go in 'images'", "without its image"]),
    ("image-singular-passrate", ["passrate", "--data", "{singular}", "--model", "{toy}"], 3,
     ["singular.jsonl, row 1, field 'image'"]),
    ("image-bytes-as-text", ["data", "check", "{bytes_text}"], 3,
     ["bytes_text.jsonl, row 1, field 'images'", "an image's 'bytes' must be raw bytes, got str"]),
    ("image-dict-not-an-image", ["data", "check", "{not_image}"], 3,
     ["not_image.jsonl, row 1, field 'images'", "cannot decode image"]),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "code", "fragments"), [c[1:] for c in IMAGES], ids=[c[0] for c in IMAGES])
def test_images_are_checked_against_the_processor_limits_before_any_work(
    tmp_path, files, argv, code, fragments
):
    _run_case(tmp_path, files, argv, code, fragments)


FILES = [
    ("manifest-not-utf8", ["data", "check", "{latin1}"], 3, ["latin1.yaml: not UTF-8 text (invalid continuation byte"]),
    ("suite-not-utf8", ["eval", "--suite", "{latin1}", "--model", "m"], 3, ["latin1.yaml: not UTF-8 text"]),
    ("pickle-model", ["passrate", "--data", "{data}", "--model", "{pickled}"], 3,
     ["pickled-model: model directory holds only pickle weights (pytorch_model.bin)", "safetensors only",
      "never unpickles"]),
    ("sft-int-role", ["sft", "--data", "{int_role}", "--model", "{toy}", "--max-steps", "1"], 3,
     ["int_role.jsonl, row 1, field 'messages[0].role'", "role 1 is not one of system, user, assistant"]),
    ("sft-unknown-role", ["sft", "--data", "{wizard}", "--model", "{toy}", "--max-steps", "1"], 3,
     ["wizard.jsonl, row 1, field 'messages[0].role'", "role 'wizard' is not one of"]),
    ("empty-dataset-dir", ["data", "check", "{empty_dir}"], 3, ["empty-dir: the directory holds no dataset files"]),
    ("unreadable-dataset-dir", ["data", "check", "{mixed_dir}"], 3,
     ["mixed-dir: could not read the folder's data files"]),
    ("empty-bench-name", ["eval", "--bench", "", "--model", "{toy}"], 2, ["--bench: an empty benchmark name"]),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "code", "fragments"), [c[1:] for c in FILES], ids=[c[0] for c in FILES])
def test_files_and_records_that_cannot_be_read_are_named(tmp_path, files, argv, code, fragments):
    _run_case(tmp_path, files, argv, code, fragments)


@pytest.mark.valid_input
def test_a_local_folder_of_data_files_is_read_without_the_hub(tmp_path, files):
    """A folder is local data: read as such, never reported as missing from the Hugging Face cache."""
    code, text = _invoke(tmp_path / "artifacts", ["data", "check", str(files["jsonl_dir"])])
    assert code == 0, text
    assert "4 rows from" in text and "Hugging Face cache" not in text


TRACKERS = [
    ("online-without-key", {"WANDB_MODE": "online"}, "needs W&B credentials: set WANDB_API_KEY or run 'wandb login'"),
    ("bad-mode", {"WANDB_MODE": "bogus"}, "WANDB_MODE='bogus' is not a W&B mode"),
]  # fmt: skip


@pytest.mark.parametrize("verb", ["rl", "sft"])
@pytest.mark.parametrize(("env", "fragment"), [c[1:] for c in TRACKERS], ids=[c[0] for c in TRACKERS])
def test_wandb_is_checked_before_any_work(tmp_path, files, monkeypatch, verb, env, fragment):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    argv = [verb, "--data", "{data}", "--model", "{toy}", "--report-to", "wandb"]
    _run_case(tmp_path, files, argv, 2, [fragment], env=env)


CHOICE = [
    ("passrate-one-bad-gold", ["passrate", "--data", "{mc_one_bad}", "--model", "{toy}", "--grader", "choice"], 3,
     ["1 invalid input(s)", "mc_one_bad.jsonl, row 8, field 'answer'", "gold answer 'Q' is neither"]),
    ("passrate-all-bad-golds", ["passrate", "--data", "{mc_all_bad}", "--model", "{toy}", "--grader", "choice"], 3,
     ["4 invalid input(s)", "mc_all_bad.jsonl, row 1, field 'answer'"]),
    ("rl-all-bad-golds", ["rl", "--data", "{mc_all_bad}", "--model", "{toy}", "--set", "grading.grader=choice"], 3,
     ["mc_all_bad.jsonl, row 4, field 'answer'", "gold answer 'purple'"]),
    ("thirty-options", ["eval", "--data", "{mc30}", "--from-samples", "{mc30_samples}", "--grader", "choice"], 3,
     ["mc30.jsonl, row 1, field 'answer'", "30 options: the choice grader names options A-Z, at most 26"]),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "code", "fragments"), [c[1:] for c in CHOICE], ids=[c[0] for c in CHOICE])
def test_choice_golds_are_checked_when_the_data_loads(tmp_path, files, argv, code, fragments):
    _run_case(tmp_path, files, argv, code, fragments)


REPLAY = [
    ("unknown-problem-id", ["eval", "--data", "{three}", "--from-samples", "{samples_unknown}"], 3,
     ["samples_unknown.jsonl, row 4, field 'problem_id'", "samples for 1 problem id(s) that are not in the data, e.g. 'ghost'"]),
    ("problem-without-samples", ["eval", "--data", "{three}", "--from-samples", "{samples_missing}"], 3,
     ["samples_missing.jsonl: no completion for 1 (problem_id, sample_idx) pair(s) of the data, e.g. 'p3'/0"]),
    ("bad-row", ["eval", "--data", "{three}", "--from-samples", "{samples_bad_row}"], 3,
     ["samples_bad_row.jsonl, row 2, field 'sample_idx'"]),
    ("passrate-replay-unknown", ["passrate", "--data", "{three}", "--backend", "replay", "-k", "1",
                                 "--set", "replay_file={samples_unknown}"], 3, ["samples for 1 problem id(s)"]),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "code", "fragments"), [c[1:] for c in REPLAY], ids=[c[0] for c in REPLAY])
def test_replayed_samples_must_match_the_data(tmp_path, files, argv, code, fragments):
    _run_case(tmp_path, files, [*argv, "--grader", "boxed_int"], code, fragments)


def test_an_invalid_manifest_does_not_hide_the_others(tmp_path, files):
    root = tmp_path / "artifacts"
    code, text = _invoke(root, ["data", "list"], env={"ARES_MANIFESTS": str(files["manifests"])})
    assert code == 0, text
    assert "warning:" in text and "latin1.yaml: not UTF-8 text" in text
    assert "math500" in text and "toy-train" in text


def _suite(tmp: Path, name: str, benches: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(f"name: {name}\ndescription: d\nbenches:\n{benches}")
    return path


SUITES = [
    ("missing-benchmark", "  - {bench: toy-test, label: t, k: 1, metrics: [avg]}\n"
     "  - {bench: no-such-bench, label: n, k: 1, metrics: [avg]}\n",
     ["field 'benches[1].bench'", "unknown dataset manifest 'no-such-bench'"]),
    ("pass-at-zero", "  - {bench: toy-test, label: t, k: 1, metrics: [avg]}\n"
     "  - {bench: toy-val, label: v, k: 2, metrics: [pass@0]}\n",
     ["field 'benches[1].metrics'", "pass@N needs 1 <= N <= k (2)"]),
    ("k-too-large", "  - {bench: toy-test, label: t, k: 100000, metrics: [avg]}\n",
     ["field 'benches[0].k'", "must be an integer in 1..4096, got 100000"]),
]  # fmt: skip


@pytest.mark.parametrize(("benches", "fragments"), [c[1:] for c in SUITES], ids=[c[0] for c in SUITES])
def test_a_suite_is_checked_whole_before_its_first_eval(tmp_path, benches, fragments):
    """Every benchmark of a suite is validated first: no eval of the earlier benchmarks runs, and a K is
    reported as the suite's field, not as a --bench flag the user never passed."""
    suite = _suite(tmp_path, "shared_suite", benches)
    root = tmp_path / "artifacts"
    code, text = _invoke(root, ["eval", "--suite", str(suite), "--model", str(TOY)])
    assert code == 3, text
    assert str(suite) in text and all(f in text for f in fragments), text
    assert "--bench" not in text and not root.exists()


REFUSED_EARLY = [
    ("backend-tpu", ["passrate", "--data", "toy-train", "--model", "{toy}", "--backend", "tpu"], 2,
     ["config key 'backend': 'tpu' is not one of auto, hf, vllm, replay"]),
    ("empty-stop", ["eval", "--data", "toy-test", "--model", "{toy}", "--set", "stop=['']"], 2,
     ["config key 'stop': every stop string must be non-empty, got ['']"]),
    ("rl-clip-low-negative", ["rl", "--data", "toy-train", "--model", "{toy}", "--set", "loss.clip_low=-1"], 2,
     ["config key 'loss.clip_low': -1.0 is out of range (must be >= 0)"]),
    ("rl-dual-clip-below-one", ["rl", "--data", "toy-train", "--model", "{toy}", "--set", "loss.dual_clip=0.5"], 2,
     ["config key 'loss.dual_clip': 0.5 is out of range (must be > 1)"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "code", "fragments"), [c[1:] for c in REFUSED_EARLY], ids=[c[0] for c in REFUSED_EARLY]
)
def test_refused_runs_are_refused_before_the_model_loads_and_leave_no_partial(
    tmp_path, files, argv, code, fragments
):
    _run_case(tmp_path, files, argv, code, fragments)
    assert not (tmp_path / "artifacts").exists()
