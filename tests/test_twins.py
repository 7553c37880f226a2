"""Shape twins: the papers' models' configurations as published, and an RL step at a 152k vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ares_cli.errors import UsageError
from ares_cli.rehearsal.twins import TWINS, twin_config, twin_layers, twin_parameters

PERFORMANCE_DOC = Path(__file__).resolve().parents[1] / "docs" / "performance.md"

PUBLISHED = {  # name: (hidden, intermediate, heads, kv heads, full layers, vocab, tied, context)
    "qwen2.5-math-1.5b": (1536, 8960, 12, 2, 28, 151936, True, 4096),
    "qwen2.5-7b-instruct": (3584, 18944, 28, 4, 28, 152064, False, 32768),
    "qwen2.5-vl-3b": (2048, 11008, 16, 2, 36, 151936, True, 128000),
    "qwen2.5-vl-7b": (3584, 18944, 28, 4, 28, 152064, False, 128000),
    "qwen2.5-0.5b": (896, 4864, 14, 2, 24, 151936, True, 32768),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_twin_configs_keep_the_published_shapes_and_cut_only_depth(name):
    hidden, inter, heads, kv, full, vocab, tied, context = PUBLISHED[name]
    config = twin_config(name, 2)
    text = getattr(config, "text_config", config)
    assert (text.hidden_size, text.intermediate_size, text.num_attention_heads, text.num_key_value_heads) == (
        hidden, inter, heads, kv)  # fmt: skip
    assert (text.vocab_size, text.max_position_embeddings, text.num_hidden_layers) == (vocab, context, 2)
    assert config.tie_word_embeddings is tied and TWINS[name].full_layers == full
    if TWINS[name].kind == "vl":
        assert text.rope_parameters["mrope_section"] == [16, 24, 24]  # 3-D rope, sums to head_dim / 2
        assert sum(text.rope_parameters["mrope_section"]) * 2 == hidden // heads
        vision = config.vision_config
        assert (vision.hidden_size, vision.depth, vision.out_hidden_size) == (1280, 2, hidden)
        assert vision.fullatt_block_indexes == [1]  # one windowed block and one full-attention block
        assert (config.image_token_id, config.vision_start_token_id) == (151655, 151652)


def test_layers_default_to_two_and_full_depth_for_the_measurement_twin():
    assert twin_layers("qwen2.5-math-1.5b", None) == 2
    assert twin_layers("qwen2.5-0.5b", None) == 24
    assert twin_config("qwen2.5-vl-7b", 8).vision_config.fullatt_block_indexes == [7]
    with pytest.raises(UsageError, match="1..28"):
        twin_layers("qwen2.5-math-1.5b", 29)
    with pytest.raises(UsageError, match="valid: qwen2.5-0.5b"):
        twin_layers("llama-3-8b", 2)


def _count(n: int) -> str:
    """A parameter count as the doc prints it: 327 M, 1.56 G."""
    return f"{n / 1e9:.2f} G" if n >= 1e9 else f"{n / 1e6:.0f} M"


def test_the_performance_doc_twin_table_is_the_twins_configuration():
    """docs/performance.md's twin table: every twin, its source, vocabulary, tying and parameter count at its
    default depth (counted on the meta device) as the configuration gives them."""
    lines = PERFORMANCE_DOC.read_text(encoding="utf-8").splitlines()
    head = lines.index("| twin | source | kept | parameters (default depth) | vocabulary | tied |")
    rows = {}
    for line in lines[head + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    assert sorted(rows) == sorted(TWINS)
    for name, (_, source, kept, params, vocab, tied) in rows.items():
        spec, text = TWINS[name], TWINS[name].text
        assert source == spec.repo, name
        assert (
            kept.startswith(f"{twin_layers(name, None)} of {spec.full_layers}")
            or kept == f"all {spec.full_layers}"
        )
        assert params == _count(twin_parameters(name)), name
        assert vocab == f"{text['vocab_size']:,}" and tied == (
            "yes" if text["tie_word_embeddings"] else "no"
        ), name
    assert _count(326_970_880) == "327 M" and _count(1_556_113_920) == "1.56 G"


@pytest.fixture(scope="module")
def small_twin(tmp_path_factory, qwen_tokenizer_json):
    """``ares toy twin qwen2.5-0.5b --layers 2`` through the CLI: 151,936-token vocabulary, tied, 14/2 heads."""
    from conftest import run_ares

    root = tmp_path_factory.mktemp("twin-artifacts")
    out = json.loads(
        run_ares("--json", "toy", "twin", "qwen2.5-0.5b", "--layers", "2", process=False, root=root).stdout
    )
    return root, out


def test_toy_twin_writes_a_loadable_verified_artifact(small_twin):
    """In the fast tier: the only test that reaches `ares toy twin` and the twin builder (coverage-tiers)."""
    from conftest import run_ares

    from ares_cli.models import load_model, load_tokenizer

    root, out = small_twin
    model_dir = f"{out['path']}/model"
    info = json.loads(open(f"{model_dir}/twin.json").read())
    assert info["twin"] == "qwen2.5-0.5b" and info["layers"] == 2 and info["source"] == "Qwen/Qwen2.5-0.5B"
    assert info["parameters"] == twin_parameters("qwen2.5-0.5b", 2)  # the meta-device count is the built one
    assert json.loads(open(f"{model_dir}/config.json").read())["dtype"] == "bfloat16"
    generation = json.loads(open(f"{model_dir}/generation_config.json").read())
    assert generation["max_new_tokens"] == 2048 and generation["eos_token_id"] == 151643
    model, tok = load_model(model_dir), load_tokenizer(model_dir)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tok.eos_token_id == 151643 and tok.convert_tokens_to_ids("<|im_end|>") == 151645
    run_ares("artifacts", "verify", out["artifact_id"], process=False, root=root)
    again = json.loads(
        run_ares("--json", "toy", "twin", "qwen2.5-0.5b", "--layers", "2", process=False, root=root).stdout
    )
    assert again["up_to_date"] and again["artifact_id"] == out["artifact_id"]


@pytest.mark.slow
def test_one_rl_step_on_a_152k_twin_agrees_between_the_fused_head_and_the_logits(small_twin, tmp_path):
    """One PAEC step (nucleus entropy, top-two gap, entropy penalty) with a global entropy bonus, so the
    statistics' gradients reach the 151,936-row tied head: fused and logits paths log the same step."""
    from ares_cli.data.loader import load_problems
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.trainer import train_rl

    _, out = small_twin
    problems = load_problems("rehearse-math-val").records[:2]
    rows = {}
    for path in ("fused", "logits"):
        sets = ["algo=paec", "steps=1", "save_every=0", "rollout.prompts_per_step=2", "rollout.group_size=2",
                "rollout.max_new_tokens=6", "rollout.backend=hf", "optim.mini_batch_size=2",
                "optim.micro_batch_size=2", "optim.lr=1e-3", "kl.coef=0", "loss.entropy_coef=0.01",
                "grading.workers=1", "val.every=0", "loss.chunk_size=3", f"optim.stats_path={path}"]  # fmt: skip
        result = train_rl(resolve_rl_config(sets=sets), model_path=f"{out['path']}/model", problems=problems,
                          val_problems=None, out_dir=tmp_path / path, log=lambda _m: None)  # fmt: skip
        assert result.complete
        rows[path] = json.loads((tmp_path / path / "metrics.jsonl").read_text().splitlines()[-1])
    fused, logits = rows["fused"], rows["logits"]
    assert fused["response_len"] == logits["response_len"] > 0  # the same rollouts
    assert fused["grad_norm"] > 0
    for key in ("entropy", "loss", "grad_norm", "paec/h0", "paec/h_bar_step", "paec/score_mean"):
        assert fused[key] == pytest.approx(logits[key], rel=1e-4, abs=1e-6), key


def test_the_twin_memory_benchmark_measures_a_checkpointed_step_with_checkpointing_on(monkeypatch):
    """bench_twin_memory's step child: with checkpointing on, the model is put in the trainers' mode."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_twin_memory
    import transformers

    from ares_cli.toy.build import base_dir

    seen = []
    enable = transformers.PreTrainedModel.activation_checkpointing_enable

    def spy(self, *args, **kwargs):
        seen.append(type(self).__name__)
        return enable(self, *args, **kwargs)

    monkeypatch.setattr(transformers.PreTrainedModel, "activation_checkpointing_enable", spy)
    off = bench_twin_memory._step(str(base_dir()), "sft", 64, "fused", False)
    assert seen == []
    on = bench_twin_memory._step(str(base_dir()), "sft", 64, "fused", True)
    assert len(seen) == 1
    assert on["peak_extra_mib"] > 0 and off["peak_extra_mib"] > 0 and on["vocab"] == off["vocab"] == 92
