"""Hostile inputs through the real CLI: each exits with its documented code and a message naming the problem.

Table-driven and fast: every case fails at validation, before a model loads or a stage opens its partial
directory (the test checks that none is left behind). Exit codes: 2 usage, 3 missing/invalid input.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ares_cli.main import app


def _files(tmp: Path) -> dict[str, Path]:
    data = tmp / "problems.jsonl"
    data.write_text(json.dumps({"id": "p1", "problem": "1+1?", "answer": "2"}) + "\n")
    latin1 = tmp / "latin1.yaml"
    latin1.write_bytes("k: 2  # caf\xe9\n".encode("latin-1"))
    return {"data": data, "latin1": latin1}


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
    ("rl-lr-inf", ["rl", "--data", "{data}", "--model", "m", "--set", "optim.lr=.inf"], 2,
     ["'optim.lr'", "not a finite number"]),
    ("yaml-not-utf8", ["passrate", "--data", "{data}", "--model", "m", "--config", "{latin1}"], 2,
     ["latin1.yaml", "not UTF-8"]),
    ("artifact-glob", ["artifacts", "show", "passrate-**"], 3, ["no complete artifact 'passrate-**'"]),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "code", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_with_its_code_and_names_the_problem(tmp_path, argv, code, fragments):
    files = _files(tmp_path)
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
