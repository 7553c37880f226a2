"""The hf backend on a tiny random Llama with a word-level tokenizer built here (no downloads)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ares_cli.errors import UsageError  # noqa: E402
from ares_cli.generation import (  # noqa: E402
    Completion,
    GenerationRequest,
    SamplingParams,
    get_backend,
    render_prompt,
    seed_for,
)

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
WORDS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"] + [str(d) for d in range(10)]
WORDS += "the a is what plus minus times answer so we get x y z = + - ( ) . , boxed think then".split()
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS + WORDS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = build_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    path = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def backend(tiny_dir):
    return get_backend("hf", tiny_dir, batch_size=64)


def prompt(backend, problem: str) -> str:
    return render_prompt(backend.tokenizer, problem)


def test_render_prompt_system_and_template(backend):
    text = render_prompt(
        backend.tokenizer, "1 plus 2", system_prompt="think then answer", template="what is {problem} ?"
    )
    assert (
        text == "<s><|system|> think then answer <|end|> <|user|> what is 1 plus 2 ? <|end|> <|assistant|> "
    )
    assert render_prompt(backend.tokenizer, "x") == "<s><|user|> x <|end|> <|assistant|> "
    assert render_prompt(backend.tokenizer, "x", template="{problem} \\boxed{{}}").endswith(
        "x \\boxed{} <|end|> <|assistant|> "
    )
    with pytest.raises(UsageError):
        render_prompt(backend.tokenizer, "x", template="no field")
    with pytest.raises(UsageError):
        render_prompt(backend.tokenizer, "x", template="{problem} \\boxed{}")


def test_shapes_logprobs_and_seed_reproducibility(backend):
    req = GenerationRequest(prompt(backend, "1 plus 2"), seeds=(11, 12, 13), key="p1")
    sp = SamplingParams(temperature=1.0, max_new_tokens=12)
    first = backend.generate([req], sp)
    again = backend.generate([req], sp)
    assert len(first) == 1 and len(first[0]) == 3
    for a, b in zip(first[0], again[0], strict=True):
        assert isinstance(a, Completion) and a.token_ids == b.token_ids and a.text == b.text
        assert 1 <= a.n_tokens <= 12 and len(a.logprobs) == a.n_tokens
        assert all(lp <= 0 for lp in a.logprobs)
        assert a.finish_reason in ("stop", "length")
        assert a.text == backend.tokenizer.decode(a.token_ids, skip_special_tokens=True)
    # different seeds give different samples (vocab ~40, 12 tokens: a collision would be astronomically rare)
    assert len({tuple(c.token_ids) for c in first[0]}) == 3


def test_logprobs_match_a_full_forward_pass(backend):
    ids = backend.encode(prompt(backend, "2 times 3"))
    [[comp]] = backend.generate(
        [GenerationRequest(prompt(backend, "2 times 3"), seeds=(5,))], SamplingParams(max_new_tokens=8)
    )
    full = torch.tensor([ids + comp.token_ids])
    with torch.no_grad():
        logits = backend.model(full).logits[0, len(ids) - 1 : -1].float()
    ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(comp.token_ids)[:, None]).squeeze(-1)
    assert torch.allclose(ref, torch.tensor(comp.logprobs), atol=1e-4)


def test_batch_composition_does_not_change_a_sample(tiny_dir, backend):
    """A sample depends only on (prompt, seed, sampling): alone, in a mixed batch, or in small chunks.

    Left padding changes fp32 logprobs by ~5e-7 (measured); with inverse-CDF sampling that can only flip a
    token whose CDF boundary lies within ~1e-6 of the row's uniform, so texts are identical for this model.
    EOS is widened to a quarter of the vocabulary so rows finish at different steps and get dropped.
    """
    eos = set(range(4, len(backend.tokenizer), 4)) | backend.eos_ids
    target = GenerationRequest(
        prompt(backend, "x plus y"), seeds=tuple(seed_for(0, "t", i) for i in range(4)), key="t"
    )
    others = [
        GenerationRequest(
            prompt(backend, "what is the answer ( 1 plus 2 ) times 3 minus 4 ?"), seeds=(1, 2, 3)
        ),
        GenerationRequest(prompt(backend, "z"), seeds=(4,)),
        GenerationRequest(prompt(backend, "x plus y"), seeds=(99,)),  # same prompt, different seed
    ]
    for sp in (
        SamplingParams(temperature=1.0, max_new_tokens=20),
        SamplingParams(temperature=0.7, top_p=0.8, max_new_tokens=20),
    ):
        runs = []
        for batch_size, reqs, pos in (
            (64, [target], 0),
            (64, [others[0], target, *others[1:]], 1),
            (3, [*others, target], 3),
        ):
            b = get_backend("hf", tiny_dir, batch_size=batch_size)
            b.eos_ids = eos
            runs.append(b.generate(reqs, sp)[pos])
        alone = runs[0]
        assert len({c.n_tokens for c in alone}) > 1 or any(c.finish_reason == "stop" for c in alone)
        for run in runs[1:]:
            for a, b in zip(alone, run, strict=True):
                assert a.token_ids == b.token_ids and a.text == b.text and a.finish_reason == b.finish_reason
                assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)


def test_greedy_matches_model_generate(backend):
    texts = ["1 plus 2", "what is the answer ( 3 times 4 ) ?"]
    sp = SamplingParams(temperature=0.0, max_new_tokens=16)
    out = backend.generate([GenerationRequest(prompt(backend, t), seeds=(1, 2)) for t in texts], sp)
    for t, comps in zip(texts, out, strict=True):
        ids = torch.tensor([backend.encode(prompt(backend, t))])
        with torch.no_grad():
            ref = backend.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=16,
                pad_token_id=backend.pad_id,
            )[0, ids.shape[1] :].tolist()
        ref = (
            ref[: ref.index(backend.tokenizer.eos_token_id) + 1]
            if backend.tokenizer.eos_token_id in ref
            else ref
        )
        assert comps[0].token_ids == ref and comps[1].token_ids == ref  # greedy ignores seeds


def test_max_new_tokens_and_length_finish(backend):
    backend_eos = backend.eos_ids
    backend.eos_ids = set()  # nothing can stop early
    try:
        [[c]] = backend.generate(
            [GenerationRequest(prompt(backend, "z"), seeds=(3,))], SamplingParams(max_new_tokens=7)
        )
    finally:
        backend.eos_ids = backend_eos
    assert c.n_tokens == 7 and c.finish_reason == "length"


def test_stop_strings_truncate_text(backend):
    req = GenerationRequest(prompt(backend, "1 plus 2"), seeds=(21, 22, 23, 24))
    full = backend.generate([req], SamplingParams(max_new_tokens=24))[0]
    sample = next(c for c in full if len(c.text.split()) >= 4)
    words = sample.text.split()
    stop_word = next(w for w in words[2:] if w not in words[:2])
    cut = sample.text.index(stop_word)
    stopped = backend.generate([req], SamplingParams(max_new_tokens=24, stop=(stop_word,)))[0]
    got = stopped[full.index(sample)]
    assert got.finish_reason == "stop"
    assert got.text == sample.text[:cut]
    assert got.token_ids == sample.token_ids[: len(got.token_ids)]
    assert stop_word not in got.text


def test_eos_is_kept_in_token_ids_but_not_text(backend):
    eos = backend.tokenizer.eos_token_id
    comps = backend.generate(
        [GenerationRequest(prompt(backend, "1"), seeds=tuple(range(40)))], SamplingParams(max_new_tokens=40)
    )[0]
    ended = [c for c in comps if c.token_ids and c.token_ids[-1] == eos]
    assert ended, "no sample hit EOS in 40 x 40 tokens"
    for c in ended:
        assert c.finish_reason == "stop" and "</s>" not in c.text


def test_weight_sync_changes_samples(tiny_dir):
    from transformers import AutoModelForCausalLM

    a = get_backend("hf", tiny_dir)
    trainer = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    req = [GenerationRequest(prompt(a, "1 plus 2"), seeds=(1,))]
    sp = SamplingParams(temperature=0.0, max_new_tokens=10)
    a.sync_weights(trainer)
    ref = get_backend("hf", None, hf_model=trainer, tokenizer=a.tokenizer)
    assert a.generate(req, sp)[0][0].token_ids == ref.generate(req, sp)[0][0].token_ids
    with pytest.raises(UsageError):
        a.load_weights([("not.a.param", torch.zeros(1))])


def test_empty_inputs(backend):
    sp = SamplingParams(max_new_tokens=3)
    assert backend.generate([], sp) == []
    out = backend.generate(
        [
            GenerationRequest(prompt(backend, "1"), seeds=()),
            GenerationRequest(prompt(backend, "2"), seeds=(1,)),
        ],
        sp,
    )
    assert out[0] == [] and len(out[1]) == 1
    with pytest.raises(UsageError):
        backend.generate([GenerationRequest("", seeds=(1,), key="p")], sp)
