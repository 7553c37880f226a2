"""SFT: response-only labels, batching, loss invariances, exact resume, vision freezing, checkpoints."""

from __future__ import annotations

import json
import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fixtures_tiny_model import tiny_tokenizer, write_sft_jsonl  # noqa: E402

from ares_cli.errors import InputError  # noqa: E402
from ares_cli.models import freeze_vision_tower, load_model  # noqa: E402
from ares_cli.training import checkpoint  # noqa: E402
from ares_cli.training.sft import SFTConfig, lr_at, micro_loss, train_sft  # noqa: E402
from ares_cli.training.sft_data import (  # noqa: E402
    IGNORE,
    collate,
    encode,
    epoch_batches,
    load_examples,
    micro_batches,
    to_messages,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tiny_chars_model_dir):
    root = tmp_path_factory.mktemp("tiny")
    return tiny_chars_model_dir, write_sft_jsonl(root / "sft.jsonl", 24)


def _cfg(**kw):
    base = dict(
        epochs=2, lr=1e-3, batch_size=8, micro_batch_size=2, max_seq_len=96, save_every=0, warmup_ratio=0.1
    )
    return SFTConfig(**{**base, **kw})


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model" / "model.safetensors"))


def test_labels_cover_exactly_the_assistant_turn():
    tok = tiny_tokenizer()
    ex, truncated = encode(tok, to_messages({"prompt": "1+2", "response": "1+2=3 \\boxed{3}"}), 512)
    assert not truncated
    labelled = tok.decode([t for t, lab in zip(ex.input_ids, ex.labels, strict=True) if lab != IGNORE])
    assert labelled == "1+2=3 \\boxed{3}<|end|>\n"
    first = next(i for i, lab in enumerate(ex.labels) if lab != IGNORE)
    assert tok.decode(ex.input_ids[:first]) == "<s><|user|>1+2<|end|>\n<|assistant|>"


def test_multi_turn_messages_label_every_assistant_turn_only():
    tok = tiny_tokenizer()
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "bb"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "dd"},
    ]
    ex, _ = encode(tok, to_messages({"messages": msgs}), 512)
    labelled = tok.decode([t for t, lab in zip(ex.input_ids, ex.labels, strict=True) if lab != IGNORE])
    assert labelled == "bb<|end|>\ndd<|end|>\n"


def test_bad_rows_are_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": "x", "response": "y"}) + "\n" + json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(InputError, match="row 2.*response"):
        load_examples(path, tiny_tokenizer(), 64)


def test_batches_are_deterministic_partitions_and_shards_are_disjoint():
    lengths = [random.Random(i).randint(5, 50) for i in range(37)]
    for mode in ("length_grouped", "packed"):
        a = epoch_batches(lengths, 8, seed=3, epoch=1, mode=mode)
        assert a == epoch_batches(lengths, 8, seed=3, epoch=1, mode=mode)
        assert a != epoch_batches(lengths, 8, seed=3, epoch=2, mode=mode)
        assert sorted(i for b in a for i in b) == list(range(37))
    step = list(range(7))  # a short last step: some of the 2 x 2 micro-batches get 1 example
    shards = [micro_batches(step, 2, rank, 2) for rank in range(2)]
    flat = [i for shard in shards for part in shard for i in part]
    assert sorted(flat) == step and len(shards[0]) == len(shards[1]) == 2


def test_packed_rows_do_not_attend_across_examples(tiny):
    model_dir, data = tiny
    model = load_model(model_dir).eval()
    examples, _ = load_examples(data, tiny_tokenizer(), 96)
    part = examples[:3]
    with torch.no_grad():
        padded = micro_loss(model, collate(part, pad_id=0, packed=False))
        packed = micro_loss(model, collate(part, pad_id=0, packed=True))
        one_by_one = sum(micro_loss(model, collate([ex], pad_id=0, packed=False)) for ex in part)
    assert torch.allclose(padded, one_by_one, rtol=1e-5) and torch.allclose(packed, one_by_one, rtol=1e-5)


def test_lr_schedule():
    cfg = _cfg(lr=1.0, warmup_ratio=0.25)
    assert [round(lr_at(s, 8, cfg), 4) for s in range(3)] == [0.5, 1.0, 1.0]
    assert lr_at(7, 8, cfg) < 0.1
    assert lr_at(7, 8, _cfg(lr=1.0, warmup_ratio=0.0, scheduler="constant")) == 1.0


def test_micro_batch_split_does_not_change_training(tiny, tmp_path):
    model_dir, data = tiny
    a = train_sft(
        _cfg(micro_batch_size=1, max_steps=2, max_tokens_per_micro_batch=None),
        model_path=model_dir,
        data_path=data,
        out_dir=tmp_path / "a",
        log=lambda _m: None,
    )
    b = train_sft(
        _cfg(micro_batch_size=4, max_steps=2, max_tokens_per_micro_batch=None),
        model_path=model_dir,
        data_path=data,
        out_dir=tmp_path / "b",
        log=lambda _m: None,
    )
    assert abs(a.stats["final_loss"] - b.stats["final_loss"]) < 1e-5
    c = train_sft(
        _cfg(micro_batch_size=4, max_steps=2, batching="packed", max_tokens_per_micro_batch=None),
        model_path=model_dir,
        data_path=data,
        out_dir=tmp_path / "c",
        log=lambda _m: None,
    )
    d = train_sft(
        _cfg(micro_batch_size=2, max_steps=2, batching="packed", max_tokens_per_micro_batch=None),
        model_path=model_dir,
        data_path=data,
        out_dir=tmp_path / "d",
        log=lambda _m: None,
    )
    assert abs(c.stats["final_loss"] - d.stats["final_loss"]) < 1e-5
    wa, wb = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    # fp32 sums in a different order (~1e-7 relative); Adam's first steps move each weight by ~lr, so a
    # disagreement can only show up where |grad| is at float noise level: bound it well below one lr step.
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-4


@pytest.mark.parametrize("packed", [False, True])
def test_fused_cross_entropy_matches_logits_loss_and_gradients(tiny, packed):
    model_dir, data = tiny
    tok = tiny_tokenizer()
    examples, _ = load_examples(data, tok, 96)
    batch = collate(examples[:3], pad_id=tok.pad_token_id, packed=packed)
    out = {}
    for path in ("logits", "fused"):
        model = load_model(model_dir)  # tied embeddings
        with torch.no_grad():
            model.model.norm.weight.mul_(8.0)  # peakier than random init
        loss = micro_loss(model, dict(batch), path)
        loss.backward()
        out[path] = (loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    (la, ga), (lb, gb) = out["logits"], out["fused"]
    n = int((batch["labels"] != IGNORE).sum())
    torch.testing.assert_close(lb / n, la / n, atol=1e-6, rtol=0)
    assert ga.keys() == gb.keys() and len(ga) > 5
    for k in ga:
        torch.testing.assert_close(gb[k] / n, ga[k] / n, atol=1e-5, rtol=0, msg=k)


def test_stopped_run_resumes_to_identical_weights(tiny, tmp_path):
    model_dir, data = tiny
    cfg = _cfg(epochs=2, save_every=2)  # 24 examples / 8 = 3 steps per epoch, 6 steps
    full = train_sft(
        cfg, model_path=model_dir, data_path=data, out_dir=tmp_path / "full", log=lambda _m: None
    )
    part = train_sft(
        cfg, model_path=model_dir, data_path=data, out_dir=tmp_path / "run", log=lambda _m: None, stop_after=5
    )
    assert not part.complete
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == [
        "step-000004",
        "step-000005",
    ]  # the last and the one before it
    resumed = train_sft(
        cfg, model_path=model_dir, data_path=data, out_dir=tmp_path / "run", log=lambda _m: None
    )
    assert resumed.complete and resumed.stats["steps"] == full.stats["steps"] == 6
    assert resumed.stats["final_loss"] == full.stats["final_loss"]
    assert resumed.stats["tokens"] == full.stats["tokens"]
    wf, wr = _weights(tmp_path / "full"), _weights(tmp_path / "run")
    assert all(torch.equal(wf[k], wr[k]) for k in wf)
    assert not (tmp_path / "run" / "checkpoints").exists()  # the artifact keeps only the final model

    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(str(tmp_path / "run" / "model"))
    assert AutoTokenizer.from_pretrained(str(tmp_path / "run" / "model")).chat_template


def test_vision_tower_is_frozen_by_name():
    class ToyVL(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.visual = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
            self.model = torch.nn.Module()
            self.model.vision_tower = torch.nn.Linear(4, 4)
            self.model.layers = torch.nn.Linear(4, 4)
            self.lm_head = torch.nn.Linear(4, 8)
            self.visualizer_notes = torch.nn.Linear(2, 2)  # 'visual' must match a whole name part only

    model = ToyVL()
    assert freeze_vision_tower(model) == 2 * 20 + 20
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {
        "model.layers.weight",
        "model.layers.bias",
        "lm_head.weight",
        "lm_head.bias",
        "visualizer_notes.weight",
        "visualizer_notes.bias",
    }


def test_nested_state_and_rng_round_trip_without_pickle(tmp_path):
    state = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2)}},
        "param_groups": [{"params": [0], "betas": [0.9, 0.99], "foreach": None}],
    }
    checkpoint.save_state(state, tmp_path / "opt")
    back = checkpoint.load_state(tmp_path / "opt")
    assert list(back["state"]) == [0] and torch.equal(back["state"][0]["exp_avg"], torch.ones(2))
    assert back["param_groups"] == state["param_groups"]
    checkpoint.save_state(checkpoint.rng_state(), tmp_path / "rng")
    expected_py, expected_torch = random.random(), torch.rand(3)
    checkpoint.set_rng_state(checkpoint.load_state(tmp_path / "rng"))
    assert random.random() == expected_py and torch.equal(torch.rand(3), expected_torch)
