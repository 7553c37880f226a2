"""Run a reduction over a causal LM's final hidden states through its own lm_head module.

:func:`head_computes` makes the model's output-embedding module (``get_output_embeddings()``, the
lm_head; with tied embeddings its weight is the input embedding) return ``fn(hidden, weight, bias)``
instead of logits, for the duration of one model call. The model's forward then returns that result as
``.logits``. Because the module's own ``__call__`` still runs, DeepSpeed ZeRO-3's module hooks gather the
partitioned weight for the forward and, through the module's output, again for the backward; ZeRO-2 and
plain torch need nothing special. Vision-language models work the same way (their language head is the
output embedding), and extra inputs (``pixel_values``, ...) pass through the model call untouched.
"""

from __future__ import annotations

from contextlib import contextmanager

from ares_cli.errors import UsageError


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
