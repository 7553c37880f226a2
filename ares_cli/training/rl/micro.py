"""Micro-batches of an optimiser mini-batch, and the packed layout of one micro-batch.

Planning (pure): by a row count (``optim.micro_batch_size`` consecutive rows, the default), or by a token
budget (``optim.max_tokens_per_micro_batch``): rows are sorted by length (prompt + response, longest
first) and filled greedily while the micro-batch's cost stays within the budget. The cost of a padded
micro-batch is rows x (longest prompt + longest response), what the model really computes; of a packed one
the sum of the sequence lengths. A row longer than the budget gets a micro-batch of its own.

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


def plan_micro_batches(
    prompt_lens: list[int],
    response_lens: list[int],
    *,
    rows: int,
    max_tokens: int | None = None,
    packed: bool = False,
) -> list[list[int]]:
    """Row indices of each micro-batch (see the module docstring); every row appears exactly once."""
    n = len(prompt_lens)
    if max_tokens is None and not packed:
        return [list(range(s, min(s + rows, n))) for s in range(0, n, rows)]
    order = sorted(range(n), key=lambda i: -(prompt_lens[i] + response_lens[i]))
    groups: list[list[int]] = []
    cur: list[int] = []
    cost_p = cost_r = total = 0
    for i in order:
        p, r = max(cost_p, prompt_lens[i]), max(cost_r, response_lens[i])
        t = total + prompt_lens[i] + response_lens[i]
        cost = t if packed else (len(cur) + 1) * (p + r)
        over = cost > max_tokens if max_tokens is not None else len(cur) + 1 > rows
        if cur and over:
            groups.append(sorted(cur))
            cur, p, r, t = [], prompt_lens[i], response_lens[i], prompt_lens[i] + response_lens[i]
        cur.append(i)
        cost_p, cost_r, total = p, r, t
    if cur:
        groups.append(sorted(cur))
    return groups


def equalise(groups: list[list[int]], target: int) -> list[list[int]]:
    """``target`` micro-batches: the largest is halved until the count is reached; where no group can
    be split any more, empty groups (a zero-weight pass) are appended. Ranks of DeepSpeed ZeRO must run
    the same number of forward/backward passes."""
    groups = [list(g) for g in groups]
    while len(groups) < target:
        big = max(range(len(groups)), key=lambda k: len(groups[k])) if groups else None
        if big is None or len(groups[big]) < 2:
            groups.append([])
            continue
        g = groups.pop(big)
        groups[big:big] = [g[: len(g) // 2], g[len(g) // 2 :]]
    return groups


def padded_fraction(groups: list[list[int]], prompt_lens, response_lens, packed: bool) -> float:
    """Fraction of the computed positions that are padding under a plan."""
    computed = real = 0
    for g in groups:
        if not g:
            continue
        lens = [prompt_lens[i] + response_lens[i] for i in g]
        real += sum(lens)
        computed += (
            sum(lens)
            if packed
            else len(g) * (max(prompt_lens[i] for i in g) + max(response_lens[i] for i in g))
        )
    return 1.0 - real / computed if computed else 0.0


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
