"""Access to a model's last hidden states and output projection, for statistics fused with the lm_head.

For a causal LM the trunk is the decoder (``model.model``); for a vision-language model it is the
multimodal body (``Qwen2_5_VLModel``: vision tower, merger, language model), so the hidden states it
returns already saw the images. ``lm_head`` maps them to logits: ``logits = h @ lm_head_weight(model).T``.

:func:`head_computes` runs a reduction over the final hidden states through the model's own lm_head
module for one model call: the module returns ``fn(hidden, weight, bias)`` instead of logits (the model's
forward hands it back as ``.logits``). Because the module's ``__call__`` still runs, DeepSpeed ZeRO-3's
module hooks gather the partitioned weight for the forward and, through the module's output, again for the
backward; ZeRO-2 and plain torch need nothing special; tied embeddings share the weight as usual.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from ares_cli.errors import UsageError


def decoder_trunk(model):
    """The module whose ``last_hidden_state`` feeds the lm_head (after the final norm)."""
    trunk = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    if trunk is None or trunk is model:
        raise TypeError(f"{type(model).__name__} has no separate decoder trunk")
    return trunk


def lm_head_weight(model):
    """The (vocab, hidden) output projection weight (tied to the input embeddings where the model ties)."""
    head = model.get_output_embeddings()
    if head is None:
        raise TypeError(f"{type(model).__name__} has no output embeddings")
    return head.weight


def final_hidden_states(model, **inputs: Any):
    """(batch, seq, hidden) final hidden states for ``inputs`` (input ids, mask, positions, pixel values...)."""
    inputs.setdefault("use_cache", False)
    return decoder_trunk(model)(**inputs).last_hidden_state


def output_head(model):
    """The lm_head ``nn.Linear`` of ``model`` (a DeepSpeed engine's module is unwrapped)."""
    import torch

    inner = getattr(model, "module", model)
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear):
        raise UsageError(
            f"stats_path=fused needs a model whose output embedding is an nn.Linear; "
            f"{type(inner).__name__} has {type(head).__name__}: use stats_path=logits"
        )
    config = getattr(inner, "config", None)
    for cfg in (config, getattr(config, "text_config", None)):
        if getattr(cfg, "final_logit_softcapping", None):
            raise UsageError(
                f"{type(inner).__name__} soft-caps its logits after the lm_head: use stats_path=logits"
            )
    return head


@contextmanager
def head_computes(model, fn):
    """Within the context the lm_head module returns ``fn(hidden, weight, bias)`` instead of logits."""
    head = output_head(model)
    previous = head.__dict__.get("forward")
    head.forward = lambda hidden: fn(hidden, head.weight, head.bias)
    try:
        yield head
    finally:
        if previous is None:
            del head.forward
        else:
            head.forward = previous
