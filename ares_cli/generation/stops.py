"""Where a response ends: the model's eos ids and the token that closes an assistant turn in its chat
template.

A chat-templated prompt asks for one assistant turn, and the template closes a turn with its own token:
Qwen2.5's ``<|im_end|>``. Qwen2.5-Math-1.5B (and every Qwen2.5 base model) sets eos to ``<|endoftext|>``
in both ``tokenizer_config.json`` and ``generation_config.json``, so a model that learned the template
(a cold start does) emits ``<|im_end|>`` and, stopping on eos alone, talks on to the budget. The turn's
closing token is found by rendering a two-turn conversation through the template and reading the special
token right after the assistant's text, so any template works without a list of names.
"""

from __future__ import annotations

from typing import Any

_PROBE = "ares-turn-end-probe"


def turn_end_ids(tokenizer: Any) -> set[int]:
    """The added/special token id that follows an assistant message in ``tokenizer``'s chat template
    (empty when the template has none, e.g. one that closes turns with plain text)."""
    if not getattr(tokenizer, "chat_template", None):
        return set()
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _PROBE}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception:  # a template that cannot render this conversation (e.g. images only): no extra stop
        return set()
    _, found, tail = text.partition(_PROBE)
    if not found or not tail:
        return set()
    ids = tokenizer(tail, add_special_tokens=False)["input_ids"]
    special = set(getattr(tokenizer, "all_special_ids", ())) | set(
        getattr(tokenizer, "added_tokens_decoder", {})
    )
    return {ids[0]} if ids and ids[0] in special else set()


def stop_ids(model: Any, tokenizer: Any) -> set[int]:
    """eos ids of the tokenizer and the model's generation config, plus the template's turn end."""
    ids: set[int] = set()
    for value in (
        getattr(tokenizer, "eos_token_id", None),
        getattr(getattr(model, "generation_config", None), "eos_token_id", None),
    ):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    return ids | turn_end_ids(tokenizer)
