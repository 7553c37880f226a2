"""Under ZeRO-3 the RL policy, its reference and the SFT model are built partitioned: when DeepSpeed receives
a model, each of two CPU ranks (gloo) already holds only its half of every parameter (``zero.Init`` through
transformers, :mod:`ares_cli.training.zero3_init`), and training matches the path before it, where every
rank built the whole model and ``deepspeed.initialize`` partitioned it.

Each run records, at every ``deepspeed_engine`` call, the model's parameters as the engine receives them:
real size (``ds_numel``), the rank's partition (``ds_tensor``) and the whole tensor (``data``). Tolerance:
both paths start from the same checkpoint values in the same partitions and run the same arithmetic, so the
results may differ only by float rounding; 1e-6 on losses and weights is far below one Adam step (lr 1e-3).
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
from pathlib import Path

import child_processes
import pytest

REPO = Path(__file__).resolve().parents[1]
ZERO3 = REPO / "pipelines" / "deepspeed" / "zero3.json"
DRIVER = """
import contextlib, json, os, sys
from pathlib import Path
from ares_cli.training import distributed, zero3_init


def main(stage, path, model, out, data):
    if path == "whole":  # the path before: every rank builds the whole model, deepspeed.initialize cuts it
        zero3_init.partitioned_loading = lambda config: contextlib.nullcontext(False)
    seen, real = [], distributed.deepspeed_engine

    def recording(model_, optimizer, config):
        params = {n: [zero3_init.param_numel(p), int(p.ds_tensor.numel()) if hasattr(p, "ds_tensor") else None,
                      int(p.data.numel())] for n, p in model_.named_parameters()}
        groups = [len(g["params"]) for g in optimizer.param_groups] if optimizer is not None else []
        seen.append({"optimizer": optimizer is not None, "groups": groups, "params": params})
        Path(out, f"engines.rank{os.environ['RANK']}.json").write_text(json.dumps(seen))
        return real(model_, optimizer, config)

    distributed.deepspeed_engine = recording
    if stage == "rl":
        from ares_cli.data.loader import load_problems
        from ares_cli.training.rl.config import resolve_rl_config
        from ares_cli.training.rl.trainer import train_rl

        cfg = resolve_rl_config(sets=json.loads(data))
        train_rl(cfg, model_path=model, problems=load_problems("toy-train", limit=12).records, val_problems=None,
                 out_dir=out, log=lambda m: None)
    else:
        from ares_cli.training.sft import SFTConfig, train_sft

        cfg = {"lr": 1e-3, "batch_size": 8, "micro_batch_size": 2, "max_seq_len": 96, "max_steps": 2,
               "save_every": 0, "deepspeed": os.environ["ZERO3"]}
        train_sft(SFTConfig(**cfg), model_path=model, data_path=data, out_dir=out)
    distributed.leave_process(0)


if __name__ == "__main__":  # grading workers are spawned: they import this file without running it
    main(*sys.argv[1:6])
"""
RL_SETS = ["algo=grpo", "steps=2", "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=10",
           "optim.mini_batch_size=2", "optim.micro_batch_size=2", "optim.lr=1e-3", "grading.workers=1",
           "grading.grader=test_rl_graders:parity_grade", "grading.trust_grader_code=true", "save_every=0",
           f"optim.deepspeed={ZERO3}"]  # fmt: skip


def _launch(tmp_path: Path, stage: str, path: str, model: Path, data: str) -> Path:
    out = tmp_path / path
    out.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"PYTHONPATH": f"{REPO}:{REPO / 'tests'}", "MASTER_ADDR": "127.0.0.1", "ZERO3": str(ZERO3),
                        "MASTER_PORT": str(port), "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1",
                        "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    procs = [child_processes.start([sys.executable, str(script), stage, path, str(model), str(out), data], cwd=REPO,
                                   merge_stderr=True, env=env | {"RANK": str(r), "LOCAL_RANK": str(r)})
             for r in range(2)]  # fmt: skip
    outputs = [o for o, _ in child_processes.wait_all(procs, timeout=600)]
    assert all(p.returncode == 0 for p in procs), outputs[0][-3000:] + outputs[1][-3000:]
    return out


def _engines(out: Path) -> list[list[dict]]:
    return [json.loads((out / f"engines.rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def sft_inputs(tmp_path_factory):
    from fixtures_tiny_model import save_tiny_model, write_sft_jsonl

    root = tmp_path_factory.mktemp("zero3_sft")
    return save_tiny_model(root / "base"), write_sft_jsonl(root / "sft.jsonl", 16)


@pytest.mark.slow  # four two-rank DeepSpeed runs
@pytest.mark.timeout(1500)
@pytest.mark.skipif(__import__("importlib").util.find_spec("deepspeed") is None, reason="needs deepspeed")
@pytest.mark.parametrize("stage", ["rl", "sft"])
def test_zero3_models_are_partitioned_at_load_and_train_as_before(
    stage, tiny_model_dir, sft_inputs, tmp_path
):
    import torch
    from safetensors.torch import load_file

    if stage == "rl":
        model, data, engines = tiny_model_dir, json.dumps(RL_SETS), ["policy", "reference"]
    else:
        (model, data), engines = (str(p) for p in sft_inputs), ["model"]
    new = _launch(tmp_path, stage, "partitioned", Path(model), data)
    old = _launch(tmp_path, stage, "whole", Path(model), data)

    for rank, calls in enumerate(_engines(new)):  # what each engine received: halves, never whole tensors
        assert [c["optimizer"] for c in calls] == [name != "reference" for name in engines]
        for name, call in zip(engines, calls, strict=True):
            for param, (numel, part, whole) in call["params"].items():
                assert part == math.ceil(numel / 2) and whole == 0, (rank, name, param, numel, part, whole)
    for rank, calls in enumerate(_engines(old)):  # the path before: every parameter whole on every rank
        assert all(whole == numel for c in calls for numel, _, whole in c["params"].values()), rank
    # AdamW's groups by real shape (decay on matrices), as when the parameters arrive whole
    assert [c["groups"] for c in _engines(new)[0]] == [c["groups"] for c in _engines(old)[0]]

    if stage == "rl":
        rows = [[json.loads(x) for x in (o / "metrics.jsonl").read_text().splitlines()] for o in (new, old)]
        for a, b in zip(*rows, strict=True):
            assert (a["reward"], a["response_len"]) == (b["reward"], b["response_len"])
            for key in ("loss", "kl_k3", "grad_norm"):
                assert a[key] == pytest.approx(b[key], abs=1e-6), (a["step"], key)
    wa, wb = (load_file(str(o / "model" / "model.safetensors")) for o in (new, old))
    assert wa.keys() == wb.keys()
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], atol=1e-6, rtol=0)


def test_partitioned_loading_is_a_no_op_without_zero3():
    from transformers.integrations import is_deepspeed_zero3_enabled

    from ares_cli.training.zero3_init import is_zero3, partitioned_loading

    for config in (None, {}, {"zero_optimization": {"stage": 2}}, {"zero_optimization": {"stage": 0}}):
        assert not is_zero3(config)
        with partitioned_loading(config) as partitioned:
            assert partitioned is False and not is_deepspeed_zero3_enabled()
    assert is_zero3({"zero_optimization": {"stage": 3}})


def test_adamw_groups_a_partitioned_parameter_by_its_real_shape():
    """A ZeRO-3 partition's ``data`` is an empty 1-D tensor: its weight matrix still gets weight decay."""
    import torch

    from ares_cli.models import freeze_by_name
    from ares_cli.training.sft_setup import param_groups

    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    weight = model[0].weight
    weight.data = torch.empty(0)
    weight.ds_shape, weight.ds_numel = torch.Size([3, 4]), 12
    decay, rest = param_groups(model, 0.1)
    assert decay["params"] == [weight] and rest["params"] == [model[0].bias]
    assert freeze_by_name(model, ["0"]) == 12 + 3  # frozen elements counted at their real size
