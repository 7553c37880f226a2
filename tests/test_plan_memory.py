"""The memory estimate's pure functions against hand-computed values, DeepSpeed's estimators, the header
reader against a real model, suggestions, and the estimate against a measured toy micro-step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ares_cli.errors import EXIT_INPUT, EXIT_USAGE, EXIT_WONT_FIT, InputError, UsageError
from ares_cli.planning import memory
from ares_cli.planning.memory import MicroBatch, Term
from ares_cli.planning.shapes import ModelShape, read_model_shape, shape_from_files
from ares_cli.planning.target import Estimate, Target, parse_bytes

REPO = Path(__file__).resolve().parents[1]
# h = 8, i = 16, 2 heads of 4 (q = 8), 1 key/value head, vocabulary 32
TINY = ModelShape(architecture="t", vocab=32, hidden=8, intermediate=16, layers=3, heads=2, kv_heads=1, head_dim=4,
                  tied=True, context=64, params=1000)  # fmt: skip


def test_layer_bytes_per_token_by_hand():
    # bf16: norms 2 x (4*8 + 2*2*8) = 128; attention 2 x (3*8 + 2*8) + 4*2 = 88; MLP 4*2*16 = 128
    assert memory.layer_saved_per_token(TINY, 2) == 128 + 88 + 128
    # fp32: norms 2 x (32 + 64) = 192; attention 4 x 40 + 8 = 168; MLP 4*4*16 = 256
    assert memory.layer_saved_per_token(TINY, 4) == 192 + 168 + 256
    # autocast: fp32 norms (192) + five bf16 casts of h (5*2*8 = 80), bf16 attention and MLP
    assert memory.layer_saved_per_token(TINY, 2, autocast=True) == 192 + 80 + 88 + 128


def test_trunk_bytes_by_hand():
    mb = MicroBatch(rows=2, seq=5, keep=3, predicted=4)
    per_layer = 344 * 10 + 2 * 5 * 5 * 2  # 10 tokens x 344 + the additive mask rows x seq^2 x 2
    shared = 2 * 5 * 5 + 2 * 10 * 4 * 2  # boolean mask + cos/sin tables
    final_norm = 10 * (4 * 8 + 2 * 2 * 8)
    assert (
        memory.trunk_saved(TINY, mb, 2, checkpointing=False, autocast=False)
        == 3 * per_layer + shared + final_norm
    )
    checkpointed = 3 * 10 * 8 * 2 + per_layer  # each layer's input + one layer recomputed
    assert (
        memory.trunk_saved(TINY, mb, 2, checkpointing=True, autocast=False)
        == checkpointed + shared + final_norm
    )
    unmasked = MicroBatch(rows=2, seq=5, keep=3, predicted=4, masked=False)
    assert memory.mask_per_layer(unmasked, 2) == 0


def test_head_bytes_by_hand():
    mb = MicroBatch(rows=2, seq=5, keep=3, predicted=4)
    work = 2 * 128 * 32 * 4  # two float32 blocks of min(chunk, 2^22 / V) = 128 rows x V
    fused = memory.head_bytes(TINY, mb, 2, path="fused", chunk=128, loss="stats")
    assert fused["saved"] == 4 * (8 * 2 + 20)
    assert fused["forward"] == 128 * 32 * 2 + work
    assert fused["backward"] == 4 * 32 * 8 + 32 * 8 * 2 + (4 + 6 + 10) * 8 * 2 + 128 * 32 * 2 + work
    logits = memory.head_bytes(TINY, mb, 2, path="logits", chunk=128, loss="stats")
    assert logits["saved"] == 4 * 32 * 2 and logits["forward"] == 6 * 32 * 2 + work
    # both logit gradients [6 x V], less the freed selection [4 x V], plus the weight gradient [V x h]
    assert logits["backward"] == 2 * 6 * 32 * 2 - 4 * 32 * 2 + 32 * 8 * 2 + work
    ce = memory.head_bytes(TINY, mb, 2, path="logits", chunk=128, loss="ce")
    assert ce == {"saved": 6 * 32 * 4, "forward": 6 * 32 * (2 + 4), "backward": 2 * 6 * 32 * 4}


def test_torch_model_states_are_16_bytes_per_parameter():
    assert memory.total(memory.torch_model_states(1000, 1000)) == 16_000
    assert memory.total(memory.torch_model_states(1000, 600)) == 4000 + 600 * 12
    assert memory.total(memory.torch_model_states(1000, 1000, param_bytes=2)) == 8000  # moments in bf16 too


def test_the_tied_embedding_gradient_sum_can_be_the_peak():
    """Tied: the head's held [V x h] gradient + the embedding's + their sum, 3 x V x h x 4 bytes."""
    assert memory.embedding_grad_end(TINY, 4) == 3 * 32 * 8 * 4
    wide = ModelShape(architecture="t", vocab=50_000, hidden=256, intermediate=16, layers=1, heads=2, kv_heads=1,
                      head_dim=4, tied=True, context=64, params=1000)  # fmt: skip
    mb = MicroBatch(rows=1, seq=4, keep=3, predicted=2)
    terms = {t.name: t for t in memory.update_terms(wide, mb, 4, path="fused", chunk=128, loss="stats",
                                                    checkpointing=False)}  # fmt: skip
    assert memory.total(list(terms.values())) == 3 * 50_000 * 256 * 4
    assert "end of backward" in terms["backward peak"].how


def test_zero_formulas_match_deepspeeds_estimators():
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    from ares_cli.planning.memory import zero_formula

    p, largest = 1_543_714_304, 233_373_696
    for gpus, nodes in ((1, 1), (8, 1), (8, 2)):
        for offload in (False, True):
            ds2 = estimate_zero2_model_states_mem_needs(p, gpus, nodes, cpu_offload=offload)[1]
            assert zero_formula(
                2, p, largest, gpus * nodes, bf16=True, offload_optimizer=offload
            ) == pytest.approx(ds2, abs=1)
            for params in (False, True) if offload else (False,):
                ds3 = estimate_zero3_model_states_mem_needs(p, largest, gpus, nodes, cpu_offload=offload,
                                                            cpu_offload_params=params)[1]  # fmt: skip
                ours = zero_formula(
                    3, p, largest, gpus * nodes, bf16=True, offload_optimizer=offload, offload_param=params
                )
                assert ours == pytest.approx(ds3, abs=1)


@pytest.mark.parametrize(("text", "value"), [("80GiB", 80 * 2**30), ("24 GiB", 24 * 2**30), ("80GB", 80e9),
                                             ("1.5e10", 1.5e10), ("512mib", 512 * 2**20)])  # fmt: skip
def test_parse_bytes(text, value):
    assert parse_bytes(text) == int(value)


@pytest.mark.parametrize("text", ["", "eighty", "80 parsecs", "-1GiB", "0GiB"])
def test_parse_bytes_refuses(text):
    with pytest.raises(UsageError):
        parse_bytes(text)


def test_header_shapes_match_the_real_model():
    from transformers import AutoModelForCausalLM

    shape = read_model_shape(str(REPO / "ares_cli" / "toy" / "base"))
    model = AutoModelForCausalLM.from_pretrained(str(REPO / "ares_cli" / "toy" / "base"))
    assert shape.params == sum(p.numel() for p in model.parameters())
    assert (shape.vocab, shape.hidden, shape.layers, shape.tied) == (92, 128, 4, True)


def test_header_only_twin_has_the_real_parameter_count(tmp_path, qwen_tokenizer_json):
    sys.path.insert(0, str(REPO / "tests"))
    from plan_models import header_only_twin

    directory = header_only_twin(tmp_path / "q15")
    assert (directory / "model.safetensors").stat().st_blocks * 512 < 2**20  # a hole, not 3 GB of zeros
    shape = read_model_shape(str(directory))
    assert shape.params == 1_543_714_304  # Qwen2.5-Math-1.5B
    assert shape.largest_module_params == 151936 * 1536 and shape.checkpoint_dtype == "BF16"


def test_a_config_that_contradicts_the_headers_is_refused():
    config = {"vocab_size": 100, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2}
    with pytest.raises(InputError, match="vocab_size 100"):
        shape_from_files(config, {"model.embed_tokens.weight": ([92, 8], "F32")})


def test_rl_micro_batch_by_rows_budget_and_packing():
    from ares_cli.planning.rl import rl_micro_batch
    from ares_cli.training.rl.config import resolve_rl_config

    rows = ["optim.max_tokens_per_micro_batch=null"]
    cfg = resolve_rl_config(sets=["rollout.max_new_tokens=100", "optim.micro_batch_size=4", *rows])
    assert rl_micro_batch(cfg, 20) == MicroBatch(rows=4, seq=120, keep=101, predicted=400)
    budget = resolve_rl_config(sets=["rollout.max_new_tokens=100", "optim.max_tokens_per_micro_batch=300"])
    assert rl_micro_batch(budget, 20).rows == 2
    auto = resolve_rl_config(
        sets=["rollout.max_new_tokens=100"]
    )  # the default: max(2048, 4 x 120) // 120 rows
    assert rl_micro_batch(auto, 20).rows == 17
    assert (
        rl_micro_batch(resolve_rl_config(sets=["rollout.max_new_tokens=3000"]), 20).rows == 4
    )  # 4 rows' worth
    assert (
        rl_micro_batch(resolve_rl_config(sets=["rollout.max_new_tokens=100", "algo=clip_cov"]), 20).rows == 4
    )
    packed = resolve_rl_config(sets=["rollout.max_new_tokens=100", "optim.pack_sequences=true",
                                     "optim.micro_batch_size=3", *rows])  # fmt: skip
    assert rl_micro_batch(packed, 20) == MicroBatch(rows=1, seq=360, keep=300, predicted=300)


def _estimate(need: int, budget: int) -> Estimate:
    est = Estimate(terms=[Term("x", need, "exact", "")], budget=budget, budget_how="test")
    if need > budget:
        est.reasons.append("too big")
    return est


def test_suggestions_take_each_familys_mildest_fitting_member_then_combine(monkeypatch):
    from ares_cli.planning import suggest
    from ares_cli.planning.suggest import Change, suggestions

    # a stand-in config: an int of bytes saved; each change's "save" adds to it
    monkeypatch.setattr(suggest, "with_sets", lambda saved, sets: saved + dict(sets).get("save", 0))

    def estimator(saved, zero, target):
        return _estimate(100 - saved, 60)

    families = [
        [Change("a1", (("save", 10),)), Change("a2", (("save", 50),))],
        [Change("b1", (("save", 45),))],
    ]
    assert [s.changes[0].flag for s in suggestions(0, None, Target(), families, estimator)] == ["a2", "b1"]
    additive = [[Change("x", (("save", 10),)), Change("x2", (("save", 25),))], [Change("y", (("save", 20),))]]
    combined = suggestions(0, None, Target(), additive, estimator)  # none fits alone; x2 + y does
    assert len(combined) == 1 and [c.flag for c in combined[0].changes] == ["x2", "y"]
    assert combined[0].estimate.fits
    hopeless = [[Change("z", (("save", 5),))]]
    (still,) = suggestions(0, None, Target(), hopeless, estimator)
    assert not still.estimate.fits


def test_report_exit_codes():
    from ares_cli.planning.report import PlanReport
    from ares_cli.stages.checklist import CheckResult

    ok = [CheckResult("a", "ok")]
    assert PlanReport("rl", Target(), ok, estimate=_estimate(1, 2)).exit_code == 0
    assert PlanReport("rl", Target(), ok, estimate=_estimate(3, 2)).exit_code == EXIT_WONT_FIT == 5
    failed = [
        *ok,
        CheckResult("b", "fail", exit_code=EXIT_INPUT),
        CheckResult("c", "fail", exit_code=EXIT_USAGE),
    ]
    assert PlanReport("rl", Target(), failed, estimate=_estimate(3, 2)).exit_code == EXIT_USAGE


@pytest.mark.parametrize("index", [0, 1])
def test_estimate_within_25_percent_of_a_measured_toy_step(index):
    """The benchmark's first two shapes (toy RL micro-step, fused; toy SFT step, logits), measured here."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_plan_memory

    row = bench_plan_memory.measure(bench_plan_memory.SHAPES[index])
    assert 0.75 <= row["ratio_estimate_to_measured"] <= 1.25, row
    assert row["ratio_params_only_to_measured"] < 0.5  # activations are most of it: the check can fail


def test_measured_throughput_is_the_median_per_rank(tmp_path):
    import json

    from ares_cli.planning.target import measured_throughput

    run = tmp_path / "rl-abc"
    run.mkdir()
    rows = [{"step": 1, "tokens_per_s": 900.0}, {"step": 2, "tokens_per_s": 1000.0}, {"step": 3, "tokens_per_s": 5000.0},
            {"step": 0, "val/accuracy": 0.5}]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "manifest.json").write_text(json.dumps({"stats": {"world_size": 2}}))
    rate, source = measured_throughput(tmp_path, str(run))
    assert rate == 500.0 and "median of 3 steps" in source
    with pytest.raises(InputError, match="no metrics.jsonl"):
        measured_throughput(tmp_path, str(tmp_path))
    (run / "metrics.jsonl").write_text('{"step": 1, "tokens_per_s": 900.0}\n{"step": 2\n{"step": 3}\n')
    with pytest.raises(InputError, match="row 2"):
        measured_throughput(tmp_path, str(run))
    (run / "metrics.jsonl").write_text('{"step": 1, "tokens_per_s": 900.0}\n{"step": 2, "tok')
    assert measured_throughput(tmp_path, str(run))[0] == 450.0  # a torn last write is not a step
