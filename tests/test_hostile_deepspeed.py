"""Hostile DeepSpeed files given to ``ares plan`` (issue 34, part 2): unparseable, nested deeply, non-finite,
mistyped keys ares reads, not a regular file, or forcing DeepSpeed's own optimizer beside optimizer offload;
each refused with exit 3 naming the file and the field; the files ares can train with still plan."""

from __future__ import annotations

import json
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


# --------------------------------------------------------------------------- DeepSpeed files (exit 3)

OFFLOAD = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}


def _zero(**zero) -> str:
    return json.dumps({"zero_optimization": {"stage": 2, **zero}})


DEEPSPEED_BAD = [  # (id, file name, text, words)
    ("offload with the force set true", "forced.json", json.dumps({**OFFLOAD, "zero_force_ds_cpu_optimizer": True}),
     ["field 'zero_force_ds_cpu_optimizer'", "AdamW"]),
    ("the force as a string", "force-str.json", json.dumps({**OFFLOAD, "zero_force_ds_cpu_optimizer": "false"}),
     ["field 'zero_force_ds_cpu_optimizer'", "true or false"]),
    ("stage a string", "stage-str.json", json.dumps({"zero_optimization": {"stage": "2"}}),
     ["field 'zero_optimization.stage'", "integer"]),
    ("stage 5", "stage5.json", json.dumps({"zero_optimization": {"stage": 5}}), ["field 'zero_optimization.stage'", "at most 3"]),
    ("stage -1", "stage-neg.json", json.dumps({"zero_optimization": {"stage": -1}}), ["field 'zero_optimization.stage'"]),
    ("stage 2.5", "stage-frac.json", json.dumps({"zero_optimization": {"stage": 2.5}}), ["field 'zero_optimization.stage'"]),
    ("stage a boolean", "stage-bool.json", json.dumps({"zero_optimization": {"stage": True}}),
     ["field 'zero_optimization.stage'"]),
    ("zero section a list", "zero-list.json", json.dumps({"zero_optimization": [2]}), ["field 'zero_optimization'", "object"]),
    ("zero section a string", "zero-str.json", json.dumps({"zero_optimization": "stage2"}), ["field 'zero_optimization'"]),
    ("offload a string", "off-str.json", _zero(offload_optimizer="cpu"), ["field 'zero_optimization.offload_optimizer'"]),
    ("bf16 a list", "bf16.json", json.dumps({"bf16": [True], "zero_optimization": {"stage": 2}}), ["field 'bf16'"]),
    ("micro batch zero", "mb0.json", json.dumps({"train_micro_batch_size_per_gpu": 0, "zero_optimization": {"stage": 2}}),
     ["field 'train_micro_batch_size_per_gpu'", ">= 1"]),
    ("micro batch a boolean", "mbt.json", json.dumps({"train_micro_batch_size_per_gpu": True}),
     ["field 'train_micro_batch_size_per_gpu'"]),
    ("micro batch a string", "mbs.json", json.dumps({"train_micro_batch_size_per_gpu": "4"}),
     ["field 'train_micro_batch_size_per_gpu'", "integer"]),
    ("micro batch 1e400", "mbinf.json", '{"train_micro_batch_size_per_gpu": 1e400}', ["field 'train_micro_batch_size_per_gpu'"]),
    ("accumulation negative", "ga.json", json.dumps({"gradient_accumulation_steps": -4}), ["field 'gradient_accumulation_steps'"]),
    ("train batch fractional", "tb.json", json.dumps({"train_batch_size": 7.5}), ["field 'train_batch_size'"]),
    ("clipping negative", "clip.json", json.dumps({"gradient_clipping": -1.0}), ["field 'gradient_clipping'"]),
    ("clipping a string", "clip-str.json", json.dumps({"gradient_clipping": "one"}), ["field 'gradient_clipping'"]),
    ("NaN in JSON", "nan.json", '{"gradient_clipping": NaN, "zero_optimization": {"stage": 2}}', ["NaN"]),
    ("Infinity in JSON", "inf.json", '{"zero_optimization": {"stage": 2, "reduce_bucket_size": Infinity}}', ["Infinity"]),
    ("nan in YAML", "nan.yaml", "zero_optimization:\n  stage: 2\n  reduce_bucket_size: .nan\n",
     ["field 'zero_optimization.reduce_bucket_size'", "finite"]),
    ("nested deeply (JSON)", "deep.json", _nested(100_000), ["nests deeper"]),
    ("nested deeply (YAML)", "deep.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n", ["nests deeper"]),
    ("a list", "list.json", "[2]", ["must be a mapping"]),
    ("a number", "num.json", "2", ["must be a mapping"]),
    ("malformed JSON", "bad.json", '{"zero_optimization": {"stage": 2,}', ["does not parse"]),
    ("malformed YAML", "bad.yaml", "zero_optimization: {stage: 2\n", ["does not parse"]),
    ("not UTF-8", "latin.json", "\udcff", ["not UTF-8"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "name", "text", "words"), DEEPSPEED_BAD, ids=[c[0] for c in DEEPSPEED_BAD])
def test_a_deepspeed_file_ares_cannot_train_with_is_refused_at_plan_time(
    tmp_path, sft_data, case, name, text, words
):
    path = _write(tmp_path / name, text)
    proc = _ares(
        tmp_path / "art", "plan", "sft", "--model", TOY, "--data", str(sft_data), "--deepspeed", str(path)
    )
    assert_refused(proc, 3, "plan sft: deepspeed config", str(path), *words)


@pytest.mark.parametrize(("case", "make", "words"), SPECIAL_FILES, ids=[c[0] for c in SPECIAL_FILES])
def test_a_deepspeed_file_that_is_not_a_regular_file_is_refused(tmp_path, sft_data, case, make, words):
    path = tmp_path / "zero.json"
    make(path)
    proc = _ares(
        tmp_path / "art", "plan", "sft", "--model", TOY, "--data", str(sft_data), "--deepspeed", str(path)
    )
    assert_refused(proc, 3, str(path), words)


def test_plan_rl_refuses_optimizer_offload_forced_onto_deepspeeds_optimizer_with_the_reason(tmp_path):
    path = _write(tmp_path / "off.json", json.dumps({**OFFLOAD, "zero_force_ds_cpu_optimizer": True}))
    proc = _ares(
        tmp_path / "art", "plan", "rl", "--model", TOY, "--data", "toy-train", "--deepspeed", str(path)
    )
    assert_refused(proc, 3, "plan rl: deepspeed config", str(path), "zero_force_ds_cpu_optimizer", "AdamW")


ACCEPTED_DEEPSPEED = {  # ares fills zero_force_ds_cpu_optimizer=false under offload; stage 0 checkpoints save
    "offload to cpu": OFFLOAD,
    "offload to nvme": {
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"}}
    },
    "offload in stage 3": {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}},
    "stage 0": {"zero_optimization": {"stage": 0}},
    "no zero section (stage 0)": {"bf16": {"enabled": True}},
}


@pytest.mark.valid_input
@pytest.mark.parametrize(
    "case", ["zero2", "zero3", "offload with the force off", "zero2 as YAML", *ACCEPTED_DEEPSPEED]
)
def test_a_deepspeed_file_ares_can_train_with_is_planned(tmp_path, sft_data, case):
    if case in ACCEPTED_DEEPSPEED:
        path = _write(tmp_path / "accepted.json", json.dumps(ACCEPTED_DEEPSPEED[case]))
    elif case in ("zero2", "zero3"):
        path = ZERO2.with_name(f"{case}.json")
    elif case == "zero2 as YAML":
        path = _write(
            tmp_path / "zero2.yaml", "zero_optimization:\n  stage: 2\n  reduce_bucket_size: 5.0e+8\n"
        )
    else:
        path = _write(tmp_path / "off.json", json.dumps({**OFFLOAD, "zero_force_ds_cpu_optimizer": False}))
    proc = _ares(tmp_path / "art", "--json", "plan", "sft", "--model", TOY, "--data", str(sft_data),
                 "--deepspeed", str(path))  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert any(c["name"] == "deepspeed config" and c["status"] == "ok" for c in report["checks"]), report[
        "checks"
    ]
