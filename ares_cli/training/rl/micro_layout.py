"""The layout of one micro-batch: padded rows, or its sequences packed into one row.

The plan of micro-batches (pure, shared with SFT) is :mod:`ares_cli.training.micro_batches`, by a row count
(``optim.micro_batch_size``) or by a token budget (``optim.max_tokens_per_micro_batch``; the default
``"auto"`` is :func:`~ares_cli.training.micro_batches.token_budget`, and rows for the losses whose
statistics are taken per micro-batch: :func:`~ares_cli.training.micro_batches.budget_setting`).

Packing (``optim.pack_sequences``): the micro-batch's sequences (prompt + response, padding dropped) are
concatenated into one row with position ids restarting at 0 per sequence and no attention mask, from which
transformers builds a block-diagonal causal attention (SDPA/eager with a mask; flash-attention's varlen
kernel when the model uses it), so no sequence sees another.

The loss is normalised by the global counts of the whole mini-batch (update.py), so every plan gives the
same gradient up to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass
class Layout:
    """Model inputs of one micro-batch and where its response positions are.

    ``keep`` is the model's ``logits_to_keep``; ``select(x)`` maps the lm_head input / logits the model
    produced with it to [N, ...], one entry per real response token (row-major), and ``targets`` [N] are
    the tokens they predict; ``mask`` [rows, R] places them back."""

    inputs: dict[str, Any]
    keep: Any
    mask: Tensor
    targets: Tensor
    packed: bool

    def select(self, x: Tensor) -> Tensor:
        return x[0] if self.packed else x[:, :-1][self.mask]

    def scatter(self, flat: Tensor) -> Tensor:
        """[N] values back to [rows, R], zero at padding (differentiable)."""
        return flat.new_zeros(self.mask.shape).masked_scatter(self.mask, flat)


def padded_layout(mb) -> Layout:
    input_ids = torch.cat([mb.prompt_ids, mb.response_ids], dim=1)
    attention = torch.cat([mb.prompt_mask, mb.response_mask.long()], dim=1)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    mask = mb.response_mask.bool()
    inputs = {"input_ids": input_ids, "attention_mask": attention, "position_ids": position_ids}
    return Layout(inputs, mb.response_ids.shape[1] + 1, mask, mb.response_ids[mask], packed=False)


def packed_layout(mb) -> Layout:
    p_len, r_len = mb.prompt_mask.sum(-1).tolist(), mb.response_mask.sum(-1).long().tolist()
    width = mb.prompt_ids.shape[1]
    ids, positions, predict = [], [], []
    for i, (p, r) in enumerate(zip(p_len, r_len, strict=True)):
        start = sum(len(x) for x in ids)
        ids.append(torch.cat([mb.prompt_ids[i, width - p :], mb.response_ids[i, :r]]))
        positions.append(torch.arange(p + r, device=mb.prompt_ids.device))
        predict.append(torch.arange(start + p - 1, start + p - 1 + r, device=mb.prompt_ids.device))
    mask = mb.response_mask.bool()
    inputs = {"input_ids": torch.cat(ids)[None], "position_ids": torch.cat(positions)[None]}
    return Layout(inputs, torch.cat(predict), mask, mb.response_ids[mask], packed=True)
