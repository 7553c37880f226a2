"""Distributed SFT on CPU: `torchrun --nproc_per_node 2 ares sft` (gloo) matches a 1-process run."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import child_processes  # noqa: E402
from fixtures_tiny_model import write_sft_jsonl  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from ares_cli.errors import UsageError  # noqa: E402
from ares_cli.main import app  # noqa: E402
from ares_cli.training.distributed import deepspeed_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ZERO2 = REPO / "pipelines" / "deepspeed" / "zero2.json"
# 16 examples, batch 8 = 2 ranks x 2 micro-batches x 2 sequences: 3 steps, with a checkpoint in between
ARGS = [
    "--set",
    "lr=1e-3",
    "--set",
    "micro_batch_size=2",
    "--set",
    "max_seq_len=96",
    "--set",
    "save_every=1",
    "--batch-size",
    "8",
    "--max-steps",
    "3",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_chars_model_dir):
    root = tmp_path_factory.mktemp("tiny_dist")
    return tiny_chars_model_dir, write_sft_jsonl(root / "sft.jsonl", 16)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _torchrun(root: Path, model: Path, data: Path, extra: list[str]) -> dict:
    ares = Path(sys.executable).parent / "ares"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        str(ares),
        "--artifacts-root",
        str(root),
        "--json",
        "sft",
        "--model",
        str(model),
        "--data",
        str(data),
        *ARGS,
        *extra,
    ]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = child_processes.run(cmd, env=env, timeout=700)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, proc.stdout  # only rank 0 reports
    return json.loads(lines[0])


def _single(root: Path, model: Path, data: Path) -> dict:
    result = CliRunner().invoke(
        app,
        ["--artifacts-root", str(root), "--json", "sft", "--model", str(model), "--data", str(data), *ARGS],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _assert_same_training(one: dict, two: dict) -> None:
    from safetensors.torch import load_file

    assert two["stats"]["world_size"] == 2 and two["stats"]["tokens"] == one["stats"]["tokens"]
    # Same examples per step; only the fp32 summation order differs (rank split + all-reduce), ~1e-7
    # relative per step. Adam turns gradients into ~lr-sized updates, so after 3 steps at lr 1e-3 a weight
    # can differ only where its gradient is at float-noise level; 1e-4 is 10x below one update.
    assert abs(one["stats"]["final_loss"] - two["stats"]["final_loss"]) < 1e-5
    a = load_file(one["path"] + "/model/model.safetensors")
    b = load_file(two["path"] + "/model/model.safetensors")
    assert a.keys() == b.keys()
    assert max((a[k].float() - b[k].float()).abs().max().item() for k in a) < 1e-4
    assert not list(Path(two["path"]).glob("checkpoints"))


@pytest.mark.slow  # two DeepSpeed ranks (60-140 s); test_collectives keeps a two-rank run in `make test`
@pytest.mark.timeout(900)
@pytest.mark.parametrize("stage", [2, 3])
def test_two_process_deepspeed_matches_one_process(tiny, tmp_path, stage):
    pytest.importorskip("deepspeed")
    model, data = tiny
    one = _single(tmp_path / "one", model, data)
    two = _torchrun(tmp_path / "two", model, data, ["--deepspeed", str(ZERO2.with_name(f"zero{stage}.json"))])
    assert two["stats"]["deepspeed_zero_stage"] == stage
    _assert_same_training(one, two)


@pytest.mark.timeout(900)
def test_two_process_plain_torch_matches_one_process(tiny, tmp_path):
    model, data = tiny
    one = _single(tmp_path / "one", model, data)
    two = _torchrun(tmp_path / "two", model, data, [])
    _assert_same_training(one, two)


def test_deepspeed_config_is_filled_from_the_sft_config(tmp_path):
    config = deepspeed_config(ZERO2, micro_batch=2, grad_accum=4, world_size=2, grad_clip=1.0, bf16=False)
    assert config["train_batch_size"] == 16 and config["gradient_accumulation_steps"] == 4
    assert config["zero_optimization"]["stage"] == 2 and config["bf16"]["enabled"] is False
    zero3 = deepspeed_config(
        ZERO2.with_name("zero3.json"), micro_batch=1, grad_accum=1, world_size=1, grad_clip=0.5, bf16=True
    )
    assert zero3["zero_optimization"]["stage"] == 3 and zero3["gradient_clipping"] == 0.5
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps({"train_micro_batch_size_per_gpu": 8}))
    with pytest.raises(UsageError, match="contradicts"):
        deepspeed_config(fixed, micro_batch=2, grad_accum=4, world_size=2, grad_clip=1.0, bf16=False)


DRIVER = """
import json, sys
from ares_cli.training.distributed import leave_process
from ares_cli.training.sft import SFTConfig, train_sft
cfg, model, data, out, stop = json.loads(sys.argv[1]), *sys.argv[2:6]
train_sft(SFTConfig(**cfg), model_path=model, data_path=data, out_dir=out, stop_after=int(stop) or None)
leave_process(0)  # as `ares` does in a launched rank
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_stop_and_resume_is_exact(tiny, tmp_path, stage):
    pytest.importorskip("deepspeed")
    from safetensors.torch import load_file

    model, data = tiny
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    cfg = json.dumps(
        {
            "lr": 1e-3,
            "batch_size": 8,
            "micro_batch_size": 2,
            "max_seq_len": 96,
            "epochs": 2,
            "save_every": 0,
            "deepspeed": str(ZERO2.with_name(f"zero{stage}.json")),
        }
    )
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

    def launch(out: Path, stop: int) -> None:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(_free_port()),
            str(driver),
            cfg,
            str(model),
            str(data),
            str(out),
            str(stop),
        ]
        proc = child_processes.run(cmd, env=env, timeout=700)
        assert proc.returncode == 0, proc.stderr[-4000:]

    launch(tmp_path / "full", 0)
    launch(tmp_path / "run", 2)
    assert (tmp_path / "run" / "checkpoints" / "step-000002" / "optimizer.rank1.safetensors").is_file()
    launch(tmp_path / "run", 0)
    a = load_file(str(tmp_path / "full" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
