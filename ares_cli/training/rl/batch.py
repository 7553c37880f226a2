"""A padded RL batch and the one token-statistics forward each micro-batch gets.

Layout per row: ``[left padding | prompt | response | right padding]``: prompts are left-padded to the
batch's longest prompt and responses right-padded to its longest response, so the last R + 1 positions of
every row hold the logits that predict its response (``logits_to_keep = R + 1``: no logits are built for
prompt positions). Position ids come from the attention mask, as in generation.

Per-sequence tensors live in ``seq`` ([N]), per-token ones in ``tok`` ([N, R]); :meth:`RolloutBatch.rows`
selects rows and trims the padding columns no selected row needs, slicing every tensor alike.

Image prompts: ``vision`` holds each row's :class:`~ares_cli.models.vision.VisionInputs` (None for a text
row; the rows of a group share one), so every forward over the batch (old policy, reference, policy)
sees the same pixels, and positions are the model's 3-D rotary ones
(:func:`ares_cli.models.vision.forward_inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor


@dataclass
class RolloutBatch:
    prompt_ids: Tensor  # [N, P] left-padded
    prompt_mask: Tensor  # [N, P] long
    response_ids: Tensor  # [N, R] right-padded with a valid id (pad)
    response_mask: Tensor  # [N, R] float32 {0, 1}
    group: Tensor  # [N] local group index (responses of one prompt share it)
    seq: dict[str, Tensor] = field(default_factory=dict)
    tok: dict[str, Tensor] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    vision: list | None = None  # [N] VisionInputs or None per row; None when no row has images

    def __len__(self) -> int:
        return self.response_ids.shape[0]

    @property
    def n_tokens(self) -> Tensor:
        return self.response_mask.sum(-1)

    def rows(self, index: Tensor | slice) -> RolloutBatch:
        """Rows ``index`` with the padding columns they do not need trimmed away."""
        pm, rm = self.prompt_mask[index], self.response_mask[index]
        p_keep = int(pm.sum(-1).max()) if len(pm) else 0
        r_keep = max(int(rm.sum(-1).max()) if len(rm) else 0, 1)
        p0 = self.prompt_ids.shape[1] - p_keep
        vision = None
        if self.vision is not None:
            picked = torch.arange(len(self))[index].reshape(-1).tolist()
            vision = [self.vision[i] for i in picked]
        return RolloutBatch(
            self.prompt_ids[index][:, p0:], pm[:, p0:], self.response_ids[index][:, :r_keep], rm[:, :r_keep],
            self.group[index], {k: v[index] for k, v in self.seq.items()},
            {k: v[index][:, :r_keep] for k, v in self.tok.items()}, self.meta, vision,
        )  # fmt: skip

    def to(self, device) -> RolloutBatch:
        return RolloutBatch(
            self.prompt_ids.to(device), self.prompt_mask.to(device), self.response_ids.to(device),
            self.response_mask.to(device), self.group.to(device), {k: v.to(device) for k, v in self.seq.items()},
            {k: v.to(device) for k, v in self.tok.items()}, self.meta,
            [v.to(device) if v is not None else None for v in self.vision] if self.vision is not None else None,
        )  # fmt: skip


def collate(groups, pad_id: int, processor=None) -> RolloutBatch:
    """Pad a list of :class:`~.rollout.Group` into one batch (its responses' rows per group, in order).

    A branch row whose ``context_len`` is k (entropy-triggered branching) carries its first k response
    tokens in the prompt part: context for the forward pass, no loss on them. Groups with images get their
    pixel values through ``processor``."""
    prompts, responses, group_idx = [], [], []
    for g_i, g in enumerate(groups):
        context = g.context_len or [0] * len(g.response_ids)
        for ids, k in zip(g.response_ids, context, strict=True):
            prompts.append(list(g.prompt_ids) + list(ids[:k]))
            responses.append(list(ids[k:]))
            group_idx.append(g_i)
    n = len(prompts)
    p_len = max((len(p) for p in prompts), default=1)
    r_len = max((len(r) for r in responses), default=0) or 1
    prompt_ids = torch.full((n, p_len), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((n, p_len), dtype=torch.long)
    response_ids = torch.full((n, r_len), pad_id, dtype=torch.long)
    response_mask = torch.zeros((n, r_len), dtype=torch.float32)
    for row, (p, ids) in enumerate(zip(prompts, responses, strict=True)):
        prompt_ids[row, p_len - len(p) :] = torch.tensor(p, dtype=torch.long)
        prompt_mask[row, p_len - len(p) :] = 1
        if ids:
            response_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            response_mask[row, : len(ids)] = 1.0
    vision = None
    if any(getattr(g, "images", None) for g in groups):
        from ares_cli.models.vision import encode_images

        per_group = [encode_images(processor, g.images) if g.images else None for g in groups]
        vision = [per_group[g_i] for g_i in group_idx]
    return RolloutBatch(prompt_ids, prompt_mask, response_ids, response_mask,
                        torch.tensor(group_idx, dtype=torch.long), vision=vision)  # fmt: skip


def forward_stats(
    model,
    mb: RolloutBatch,
    *,
    stats: tuple[str, ...],
    temperature: float,
    top_p: float = 0.85,
    top_k: int = 10000,
    chunk_size: int = 128,
    entropy_grad: bool = False,
):
    """One forward of ``model`` over ``mb`` and ONE chunked token-statistics pass over its response logits."""
    from ares_cli.algorithms.token_stats import select_response, token_stats
    from ares_cli.models.vision import forward_inputs

    input_ids = torch.cat([mb.prompt_ids, mb.response_ids], dim=1)
    attention = torch.cat([mb.prompt_mask, mb.response_mask.long()], dim=1)
    r = mb.response_ids.shape[1]
    out = model(input_ids=input_ids, attention_mask=attention, logits_to_keep=r + 1, use_cache=False,
                **forward_inputs(model, input_ids, attention, mb.vision))  # fmt: skip
    logits, targets = select_response(out.logits, input_ids, r)
    return token_stats(logits, targets, temperature=temperature if temperature > 0 else 1.0, top_p=top_p,
                       top_k=top_k, chunk_size=chunk_size, stats=stats, entropy_grad=entropy_grad)  # fmt: skip


def micro_slices(n: int, size: int) -> list[slice]:
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


@torch.no_grad()
def rollout_pass(
    model, batch: RolloutBatch, *, stats: tuple[str, ...], micro: int, prefix: str, **kw
) -> None:
    """No-grad statistics of ``model`` over the whole batch, stored as ``batch.tok[prefix + name]``."""
    parts: dict[str, list[Tensor]] = {}
    width = batch.response_ids.shape[1]
    for sl in micro_slices(len(batch), micro):
        out = forward_stats(model, batch.rows(sl), stats=stats, **kw)
        for name in stats:
            value = getattr(out, name).detach()
            padded = torch.zeros((value.shape[0], width), dtype=value.dtype, device=value.device)
            padded[:, : value.shape[1]] = value
            parts.setdefault(name, []).append(padded)
    for name, values in parts.items():
        batch.tok[prefix + name] = torch.cat(values).masked_fill(batch.response_mask == 0, 0)
