"""Hostile inputs through the real CLI: each exits with its documented code and a message naming the problem.

Table-driven and fast: every case fails at validation, before a model loads or a stage opens its partial
directory (the test checks that none is left behind). Exit codes: 2 usage, 3 missing/invalid input.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from input_rows import one_plus_one as _problem
from input_rows import write_jsonl as _jsonl
from typer.testing import CliRunner

from ares_cli.main import app

TOY = Path(__file__).resolve().parents[1] / "ares_cli" / "toy" / "base"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("bad-inputs")
    latin1 = tmp / "latin1.yaml"
    latin1.write_bytes("k: 2  # caf\xe9\n".encode("latin-1"))
    no_tokenizer = tmp / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tokenizer / name).write_bytes((TOY / name).read_bytes())
    truncated = tmp / "truncated"
    truncated.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        (truncated / name).write_bytes((TOY / name).read_bytes())
    with (truncated / "model.safetensors").open("r+b") as fh:
        fh.truncate(fh.seek(0, 2) // 2)
    garbage = tmp / "garbage"
    garbage.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (garbage / name).write_bytes((TOY / name).read_bytes())
    (garbage / "model.safetensors").write_bytes(b"\xff" * 64)
    rate = {"problem_id": "p1", "source": "toy", "k": 4, "n_correct": 2}
    (tmp / "rates_nan.jsonl").write_text('{"problem_id": "p1", "k": 4, "pass_rate": NaN}\n')
    return {
        "data": _jsonl(tmp / "problems.jsonl", [_problem("p1"), _problem("p2")]),
        "latin1": latin1,
        "no_tokenizer": no_tokenizer,
        "truncated": truncated,
        "garbage": garbage,
        "difficulty_dict": _jsonl(tmp / "dd.jsonl", [_problem("p1", meta={"difficulty": {"level": 3}})]),
        "huge": _jsonl(tmp / "huge.jsonl", [_problem("p1"), _problem("p2", problem="x" * 1_000_001)]),
        "long_prompt": _jsonl(
            tmp / "long.jsonl", [_problem("p1"), _problem("long-one", problem="7 + " * 400)]
        ),
        "rates_no_k": _jsonl(
            tmp / "rates.jsonl", [rate, {"problem_id": "p2", "source": "toy", "n_correct": 1}]
        ),
        "rates_nan": tmp / "rates_nan.jsonl",
        "bad_sft": _jsonl(tmp / "bad_sft.jsonl", [{"prompt": 5, "response": "x"}]),
        "rates_text": _jsonl(tmp / "rates_text.jsonl", [{"problem_id": "p1", "k": 4, "pass_rate": "high"}]),
        "unequal": _jsonl(
            tmp / "samples.jsonl",
            [{"problem_id": "p1", "sample_idx": i, "response": "\\boxed{2}"} for i in range(4)]
            + [{"problem_id": "p2", "sample_idx": i, "response": "\\boxed{2}"} for i in range(2)],
        ),
    }


# (id, argv with {data}/{latin1}/{tmp} placeholders, exit code, fragments expected in the output)
CASES = [
    ("k-zero", ["passrate", "--data", "{data}", "--model", "m", "-k", "0"], 2, ["'k'", ">= 1"]),
    ("k-negative", ["passrate", "--data", "{data}", "--model", "m", "-k", "-1"], 2, ["'k'", "out of range"]),
    ("k-huge", ["passrate", "--data", "{data}", "--model", "m", "-k", "100000000000"], 2, ["'k'", "<= 4096"]),
    ("temperature-inf", ["passrate", "--data", "{data}", "--model", "m", "--temperature", "inf"], 2,
     ["'temperature'", "not a finite number"]),
    ("temperature-nan", ["eval", "--data", "{data}", "--model", "m", "--temperature", "nan"], 2,
     ["'temperature'", "not a finite number"]),
    ("limit-zero", ["passrate", "--data", "{data}", "--model", "m", "--limit", "0"], 2, ["'limit'", ">= 1"]),
    ("top-p-zero", ["eval", "--data", "{data}", "--model", "m", "--top-p", "0"], 2, ["'top_p'", "> 0"]),
    ("easy-frac-2", ["passrate", "--data", "{data}", "--model", "m", "--set", "easy_frac=2"], 2,
     ["'easy_frac'", "<= 1"]),
    ("easy-hard-overlap",
     ["passrate", "--data", "{data}", "--model", "m", "--set", "easy_frac=0.3", "--set", "hard_frac=0.5"], 2,
     ["overlap", "hard_frac < easy_frac"]),
    ("eval-bench-k-huge", ["eval", "--model", "m", "--bench", "toy-test:100000000000"], 2, ["K must be"]),
    ("sft-epochs-zero", ["sft", "--data", "{data}", "--model", "m", "--epochs", "0"], 2, ["'epochs'", ">= 1"]),
    ("sft-max-steps-zero", ["sft", "--data", "{data}", "--model", "m", "--max-steps", "0"], 2,
     ["'max_steps'", ">= 1"]),
    ("sft-lr-negative", ["sft", "--data", "{data}", "--model", "m", "--lr", "-1"], 2, ["'lr'", "> 0"]),
    ("sft-batch-size-zero", ["sft", "--data", "{data}", "--model", "m", "--batch-size", "0"], 2,
     ["'batch_size'", ">= 1"]),
    ("sft-deepspeed-missing", ["sft", "--data", "{data}", "--model", "m", "--deepspeed", "/nonexistent.json"], 3,
     ["/nonexistent.json", "DeepSpeed config file does not exist"]),
    ("rl-deepspeed-missing", ["rl", "--data", "{data}", "--model", "m", "--deepspeed", "/nonexistent.json"], 3,
     ["/nonexistent.json", "does not exist"]),
    ("rl-kl-coef-negative", ["rl", "--data", "{data}", "--model", "m", "--set", "kl.coef=-1"], 2,
     ["'kl.coef'", ">= 0"]),
    ("rl-val-every-negative", ["rl", "--data", "{data}", "--model", "m", "--set", "val.every=-1"], 2,
     ["'val.every'", ">= 0"]),
    ("rl-prompts-per-step-zero",
     ["rl", "--data", "{data}", "--model", "m", "--set", "rollout.prompts_per_step=0"], 2,
     ["'rollout.prompts_per_step'", ">= 1"]),
    ("sft-invalid-data", ["sft", "--data", "{bad_sft}", "--model", str(TOY), "--max-steps", "1"], 3,
     ["bad_sft.jsonl, row 1, field 'prompt'"]),
    ("rl-grader-stdlib", ["rl", "--data", "{data}", "--model", "m", "--set", "grading.grader=os:system",
                           "--trust-grader-code"], 2, ["'os' is a standard-library module"]),
    ("rl-grader-untrusted", ["rl", "--data", "{data}", "--model", "m", "--set", "grading.grader=os:system"], 2,
     ["'os:system' is a module path", "--trust-grader-code"]),
    ("rl-lr-inf", ["rl", "--data", "{data}", "--model", "m", "--set", "optim.lr=.inf"], 2,
     ["'optim.lr'", "not a finite number"]),
    ("yaml-not-utf8", ["passrate", "--data", "{data}", "--model", "m", "--config", "{latin1}"], 2,
     ["latin1.yaml", "not UTF-8"]),
    ("artifact-glob", ["artifacts", "show", "passrate-**"], 3, ["no complete artifact 'passrate-**'"]),
    ("data-check-limit-zero", ["data", "check", "{data}", "--limit", "0"], 2, ["--limit must be >= 1"]),
    ("data-difficulty-dict", ["data", "check", "{difficulty_dict}"], 3,
     ["dd.jsonl, row 1, field 'meta.difficulty'", "must be a string or number, got dict"]),
    ("data-problem-too-big", ["data", "check", "{huge}"], 3,
     ["huge.jsonl, row 2, field 'problem'", "over the 1,000,000-character limit"]),
    ("curate-rate-without-k", ["curate", "--passrates", "{rates_no_k}"], 3,
     ["rates.jsonl, row 2, field 'k'", "positive integer"]),
    ("curate-nan-pass-rate", ["curate", "--passrates", "{rates_nan}"], 3,
     ["rates_nan.jsonl, row 1, field 'pass_rate'", "number in [0, 1], got nan"]),
    ("curate-text-pass-rate", ["curate", "--passrates", "{rates_text}"], 3,
     ["rates_text.jsonl, row 1, field 'pass_rate'", "got 'high'"]),
    ("eval-unequal-samples", ["eval", "--data", "{data}", "--from-samples", "{unequal}"], 3,
     ["samples.jsonl", "unequal sample counts per problem (2 to 4; 2 for ['p2'])"]),
    ("model-without-tokenizer", ["passrate", "--data", "{data}", "--model", "{no_tokenizer}"], 3,
     ["no-tokenizer", "has no tokenizer"]),
    ("model-truncated-safetensors", ["eval", "--data", "{data}", "--model", "{truncated}"], 3,
     ["truncated/model.safetensors", "truncated safetensors"]),
    ("model-garbage-safetensors-sft", ["sft", "--data", "{data}", "--model", "{garbage}"], 3,
     ["garbage/model.safetensors", "corrupt safetensors header"]),
    ("model-garbage-safetensors-rl", ["rl", "--data", "{data}", "--model", "{garbage}"], 3,
     ["garbage/model.safetensors", "corrupt safetensors header"]),
    ("prompt-longer-than-context",
     ["passrate", "--data", "{long_prompt}", "--model", str(TOY), "--max-new-tokens", "400"], 3,
     ["problem 'long-one': prompt is", "exceeds the model's 640-token context", "skip_long_prompts"]),
    ("budget-fills-context", ["eval", "--data", "{data}", "--model", str(TOY), "--max-new-tokens", "640"], 2,
     ["max_new_tokens 640 leaves no room", "640-token context"]),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "code", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_with_its_code_and_names_the_problem(tmp_path, files, argv, code, fragments):
    root = tmp_path / "artifacts"
    args = [a.format(**files, tmp=tmp_path) for a in argv]
    result = CliRunner().invoke(app, ["--artifacts-root", str(root), *args])
    assert result.exit_code == code, result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    text = " ".join(result.output.split())
    for fragment in fragments:
        assert fragment in text, text
    assert not list(root.glob("*/*.partial")) if root.exists() else True


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"HF_HUB_OFFLINE": "1"}, "offline mode is on (HF_HUB_OFFLINE)"),
        ({"HF_ENDPOINT": "http://127.0.0.1:9"}, "the hub cannot be reached (http://127.0.0.1:9)"),
    ],
    ids=["offline-switch", "unreachable-hub"],
)
@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["passrate", "--data", "{data}", "--model", "someorg/not-cached"], "model 'someorg/not-cached'"),
        (["data", "check", "hf:someorg/not-cached"], "dataset 'someorg/not-cached'"),
    ],
    ids=["model", "dataset"],
)
def test_uncached_hub_ids_fail_at_once(tmp_path, files, monkeypatch, env, fragment, argv, kind):
    """No retries against an unreachable hub: one check, then exit 3 saying what is missing and why."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # an empty cache
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = [a.format(**files) for a in argv]
    result = CliRunner().invoke(app, ["--artifacts-root", str(tmp_path / "artifacts"), *args])
    text = " ".join(result.output.split())
    assert result.exit_code == 3, text
    assert kind in text and "is not in the local Hugging Face cache" in text and fragment in text


def broken_grader(gold: str, response: str) -> bool:
    """A custom grader that fails on every sample (imported by name in the grading workers)."""
    raise RuntimeError("this grader is broken")


def test_a_grader_that_fails_on_most_samples_fails_the_stage(tmp_path, files):
    replay = _jsonl(tmp_path / "replay.jsonl", [
        {"problem_id": pid, "sample_idx": i, "response": "\\boxed{2}"} for pid in ("p1", "p2") for i in range(2)
    ])  # fmt: skip
    args = ["passrate", "--data", str(files["data"]), "--backend", "replay", "--set", f"replay_file={replay}",
            "-k", "2", "--grader", f"{__name__}:broken_grader", "--trust-grader-code"]  # fmt: skip
    result = CliRunner().invoke(app, ["--artifacts-root", str(tmp_path / "artifacts"), *args])
    text = " ".join(result.output.split())
    assert result.exit_code == 1, text
    assert "failed on 4 of 4 samples (100%, over max_grade_error_rate 0.1)" in text
    assert "this grader is broken" in text
    assert not list((tmp_path / "artifacts").glob("passrate/passrate-*[!l]"))  # no complete artifact


def test_the_error_rate_is_checked_mid_run_once_64_samples_are_graded(tmp_path):
    """20 problems x 4 samples, 16 problems a chunk: the first chunk's 64 grades already stop the stage (the
    check of ``ERROR_CHECK_MIN_SAMPLES`` inside the sampling loop), before the last chunk is generated."""
    ids = [f"p{n}" for n in range(20)]
    data = _jsonl(tmp_path / "problems.jsonl", [_problem(pid) for pid in ids])
    replay = _jsonl(tmp_path / "replay.jsonl", [
        {"problem_id": pid, "sample_idx": i, "response": "\\boxed{2}"} for pid in ids for i in range(4)
    ])  # fmt: skip
    args = ["passrate", "--data", str(data), "--backend", "replay", "--set", f"replay_file={replay}", "-k", "4",
            "--set", "chunk_problems=16", "--grader", f"{__name__}:broken_grader", "--trust-grader-code"]  # fmt: skip
    result = CliRunner().invoke(app, ["--artifacts-root", str(tmp_path / "artifacts"), *args])
    text = " ".join(result.output.split())
    assert result.exit_code == 1, text
    assert "failed on 64 of 64 samples (100%, over max_grade_error_rate 0.1)" in text


@pytest.mark.parametrize(
    ("grader", "fragment"),
    [("os:system", "'os' is a standard-library module"), ("json:loads", "standard-library"),
     ("ares_cli.grading.extract:extract_boxed", "cannot be called as fn(gold, response)")],
)  # fmt: skip
def test_callables_that_are_not_graders_are_refused_up_front(tmp_path, files, grader, fragment):
    args = ["eval", "--data", str(files["data"]), "--model", "m", "--grader", grader, "--trust-grader-code"]
    result = CliRunner().invoke(app, ["--artifacts-root", str(tmp_path / "artifacts"), *args])
    assert result.exit_code == 2 and fragment in " ".join(result.output.split())
    assert not (tmp_path / "artifacts").exists() or not list((tmp_path / "artifacts").rglob("*.partial"))


def test_a_pipeline_file_that_is_not_utf8_is_an_input_error(tmp_path):
    from ares_cli.errors import InputError
    from ares_cli.pipeline import load_pipeline

    path = tmp_path / "p.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match="p.yaml: not UTF-8 text"):
        load_pipeline(path)
    path.write_text("- just\n- a list\n")
    with pytest.raises(InputError, match="expected a mapping at the top level"):
        load_pipeline(path)
