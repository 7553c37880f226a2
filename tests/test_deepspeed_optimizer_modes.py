"""DeepSpeed modes that used to fail with ares's client AdamW: optimizer offload (DeepSpeed refuses a client
optimizer at ``initialize`` unless ``zero_force_ds_cpu_optimizer`` is false) and ZeRO stage 0 checkpoints
(no ZeRO wrapper: the engine steps the torch AdamW itself, or a 16-bit wrapper keeps the fp32 masters)."""

from __future__ import annotations

import json

import pytest

from ares_cli.errors import InputError

ZERO2_OFFLOAD = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}


def test_optimizer_offload_lets_deepspeed_take_the_client_adamw():
    from ares_cli.training.offload import with_client_optimizer

    filled = with_client_optimizer(ZERO2_OFFLOAD, "z.json")
    assert filled["zero_force_ds_cpu_optimizer"] is False
    assert "zero_force_ds_cpu_optimizer" not in ZERO2_OFFLOAD  # the caller's mapping is left as it was
    plain = {"zero_optimization": {"stage": 2}}
    assert with_client_optimizer(plain, "z.json") is plain  # nothing offloaded: nothing changed
    none = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}}
    assert "zero_force_ds_cpu_optimizer" not in with_client_optimizer(none, "z.json")


def test_a_file_forcing_deepspeeds_cpu_optimizer_with_offload_is_refused_naming_it():
    from ares_cli.training.offload import with_client_optimizer

    with pytest.raises(InputError, match="true with optimizer offload") as err:
        with_client_optimizer({**ZERO2_OFFLOAD, "zero_force_ds_cpu_optimizer": True}, "z.json")
    assert "z.json" in str(err.value) and "zero_force_ds_cpu_optimizer" in str(err.value)


def test_the_rl_preparation_fills_the_key_for_an_offloading_file(tmp_path):
    pytest.importorskip("deepspeed")
    from ares_cli.stages.prepare_rl import deepspeed_settings
    from ares_cli.training.rl.config import resolve_rl_config

    path = tmp_path / "offload.json"
    path.write_text(json.dumps({**ZERO2_OFFLOAD, "train_micro_batch_size_per_gpu": "auto",
                                "gradient_accumulation_steps": "auto", "train_batch_size": "auto"}))  # fmt: skip
    cfg = resolve_rl_config(sets=[f"optim.deepspeed={path}", "rollout.backend=hf"])
    ds, zero = deepspeed_settings(cfg, 1, on_gpu=False)
    assert ds["zero_force_ds_cpu_optimizer"] is False and zero["offload_optimizer"] == "cpu"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("bf16", [False, True])
def test_zero_stage_0_optimizer_state_saves_and_restores(bf16, monkeypatch):
    pytest.importorskip("deepspeed")
    import torch

    from ares_cli.training import checkpoint, distributed

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    dtype = torch.bfloat16 if bf16 else torch.float32

    def build():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)).to(dtype)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "train_batch_size": 2,
               "zero_optimization": {"stage": 0}, "bf16": {"enabled": bf16}, "steps_per_print": 10**9}  # fmt: skip
        return opt, distributed.deepspeed_engine(model, opt, cfg)

    opt, engine = build()
    assert distributed.zero_stage(engine) == 0
    engine.backward(engine(torch.ones(2, 8, dtype=dtype)).float().sum())
    engine.step()
    saved = checkpoint.optimizer_state(engine, opt)
    opt2, engine2 = build()
    checkpoint.load_optimizer(engine2, opt2, saved)
    again = checkpoint.optimizer_state(engine2, opt2)
    if "torch" in saved:  # fp32: the engine steps the client AdamW itself
        assert not bf16
        mine = saved["torch"]["state"]
        assert mine and all(
            torch.equal(mine[k]["exp_avg"], again["torch"]["state"][k]["exp_avg"]) for k in mine
        )
    else:  # bf16: the fp32 master weights of DeepSpeed's 16-bit wrapper
        assert bf16
        assert all(torch.equal(a, b) for a, b in zip(saved["fp32"], again["fp32"], strict=True))
        assert any(s for s in again["base"]["state"].values())
