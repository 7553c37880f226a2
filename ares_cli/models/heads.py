"""Access to a model's last hidden states and output projection, for statistics fused with the lm_head.

For a causal LM the trunk is the decoder (``model.model``); for a vision-language model it is the
multimodal body (``Qwen2_5_VLModel``: vision tower, merger, language model), so the hidden states it
returns already saw the images. ``lm_head`` maps them to logits: ``logits = h @ lm_head_weight(model).T``.
"""

from __future__ import annotations

from typing import Any


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
