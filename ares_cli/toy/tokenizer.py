"""Character-level ``PreTrainedTokenizerFast`` for the toy world, with special tokens and a chat template."""

from __future__ import annotations

import string
from pathlib import Path

BOS, EOS, PAD, UNK = "<s>", "<|end|>", "<pad>", "<unk>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK, *ROLE_TOKENS)
ALPHABET = string.digits + string.ascii_letters + " \n.,:;?!+-*/=()[]{}\\_'\""

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def build_tokenizer():
    """A fresh character-level fast tokenizer (vocab: specials then ``ALPHABET``)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate((*SPECIAL_TOKENS, *ALPHABET))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK, fuse_unk=True))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=list(ROLE_TOKENS),
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_tokenizer(out_dir: str | Path):
    """Build the tokenizer and ``save_pretrained`` it into ``out_dir``; returns it."""
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer
