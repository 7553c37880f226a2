"""A tiny random Llama + character-level fast tokenizer with a chat template, saved with save_pretrained,
and a small SFT JSONL, so SFT tests run the real code path in seconds."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
SPECIALS = ("<pad>", "<s>", "<|end|>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>")


def tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    alphabet = string.digits + string.ascii_letters + " \n.,:;?!+-*/=()[]{}\\_'\"|<>"
    vocab = {tok: i for i, tok in enumerate((*SPECIALS, *alphabet))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", fuse_unk=True))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIALS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="<|end|>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=list(SPECIALS[4:]),
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def save_tiny_model(
    out_dir: Path, *, tokenizer: str = "chars", seed: int = 0, hidden: int = 32, layers: int = 2
) -> Path:
    """A random 2-layer, 32-wide ``LlamaForCausalLM`` and its tokenizer, saved in ``out_dir``: the one
    builder of the tests' tiny text models (conftest's ``tiny_model_dir`` and ``tiny_chars_model_dir``).

    ``tokenizer="chars"``: the character-level tokenizer above (4 heads, 512 positions, tied head);
    ``"toy"``: the toy world's tokenizer and model builder (2 heads, 256 positions), as ``ares toy`` makes."""
    if tokenizer == "toy":
        from ares_cli.toy.model import ToyModelShape, build_model
        from ares_cli.toy.tokenizer import build_tokenizer

        tok = build_tokenizer()
        shape = ToyModelShape(hidden_size=hidden, num_layers=layers, num_heads=2, intermediate_size=2 * hidden,
                           max_positions=256)  # fmt: skip
        build_model(tok, shape, seed=seed).save_pretrained(out_dir)
        tok.save_pretrained(out_dir)
        return out_dir
    if tokenizer != "chars":
        raise ValueError(f"unknown tiny-model tokenizer {tokenizer!r}: chars or toy")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(out_dir))
    tok.save_pretrained(str(out_dir))
    return out_dir


def write_sft_jsonl(path: Path, n: int = 24, *, seed: int = 0) -> Path:
    """Curate-style SFT records of varied length: small arithmetic with step-by-step answers."""
    rng = random.Random(seed)
    with open(path, "w") as fh:
        for i in range(n):
            terms = [rng.randint(1, 9) for _ in range(rng.randint(1, 5))]
            steps, total = [], 0
            for t in terms:
                steps.append(f"{total}+{t}={total + t}")
                total += t
            response = " ".join(steps) + f" so \\boxed{{{total}}}"
            fh.write(
                json.dumps(
                    {
                        "problem_id": f"p{i}",
                        "source": "tiny",
                        "prompt": "+".join(map(str, terms)),
                        "response": response,
                        "n_tokens": len(response),
                        "pass_rate": 0.5,
                        "target_len": len(response),
                        "bracket": "medium",
                    }
                )
                + "\n"
            )
    return path
