"""A padded RL batch and the one token-statistics forward each micro-batch gets.

Layout per row: ``[left padding | prompt | response | right padding]``: prompts are left-padded to the
batch's longest prompt and responses right-padded to its longest response, so the last R + 1 positions of
every row hold the logits that predict its response (``logits_to_keep = R + 1``: no logits are built for
prompt positions). Position ids come from the attention mask, as in generation.

What the phases add to a batch travels in three typed carriers: :class:`SequenceValues` (tensors [N], one
value per row), :class:`TokenValues` (tensors [N, R], zero at padding) and :class:`BatchMeta` (the step's
batch-level values). Their fields are slots, so a misspelt name is an AttributeError where it is written
or read; a field is None until the phase that fills it. :meth:`RolloutBatch.rows` selects rows and trims
the padding columns no selected row needs, slicing every tensor field of the carriers alike (read from
:func:`dataclasses.fields`, so a new field is sliced too).

Image prompts: ``vision`` holds each row's :class:`~ares_cli.models.vision.VisionInputs` (None for a text
row; the rows of a group share one), so every forward over the batch (old policy, reference, policy)
sees the same pixels, and positions are the model's 3-D rotary ones
(:func:`ares_cli.models.vision.forward_inputs`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, TypeVar

import torch
from torch import Tensor

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ares_cli.models.vision import VisionInputs

Carrier = TypeVar("Carrier", bound="TensorFields")


class TensorFields:
    """Base of the tensor carriers: :meth:`mapped` applies one function to every field that is set."""

    __slots__ = ()

    def mapped(self: Carrier, fn: Callable[[Tensor], Tensor]) -> Carrier:
        """A new carrier of the same type with ``fn(value)`` for every set field (None stays None)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return type(self)(**{name: None if v is None else fn(v) for name, v in values.items()})


@dataclass(slots=True)
class SequenceValues(TensorFields):
    """Per-sequence tensors, each [N]: one value per row of the batch."""

    context_len: Tensor | None = (
        None  # long: response tokens a branch row carries in its prompt part (0: none)
    )
    origin_row: Tensor | None = None  # long: the row a branch row branched from, in this batch (-1: none)
    base_reward: Tensor | None = None  # float: the outcome reward before the algorithm (phases.rank_batch)
    correct: Tensor | None = None  # float32 {0, 1}: graded correct (phases.rank_batch)
    bucket: Tensor | None = (
        None  # long: AEPO's online difficulty bucket of the row's group (EASY/MEDIUM/HARD)
    )
    n_he: Tensor | None = (
        None  # AEPO's N_HE: high-entropy windows of the row's whole trajectory (ARES eq. 13)
    )
    trajectory_len: Tensor | None = None  # tokens of the row's whole trajectory (branch prefix included)
    aer_weight: Tensor | None = None  # AER's difficulty-aware weight w_i of the row


@dataclass(slots=True)
class TokenValues(TensorFields):
    """Per-token tensors, each [N, R] over the response positions, zero at padding."""

    entropy: Tensor | None = None  # full-vocabulary entropy of fresh rollouts (entropy-triggered branching)
    old_logprob: Tensor | None = None  # log-prob under the policy that sampled the batch (θ_old)
    old_entropy: Tensor | None = None  # θ_old's full-vocabulary entropy (step metric; AEPO, AER)
    old_nucleus_entropy: Tensor | None = None  # θ_old's entropy within the nucleus (PAEC)
    old_nucleus_size: Tensor | None = None  # long: θ_old's nucleus size (PAEC)
    old_top2_gap: Tensor | None = None  # θ_old's gap between the two largest logits (PAEC)
    ref_logprob: Tensor | None = None  # log-prob under the frozen reference (None without one)
    advantages: Tensor | None = None  # the sequence advantage on every token, plus the token bonus
    kl_weight: Tensor | None = None  # the algorithm's KL-loss weight (None: 1 everywhere)
    hwe: Tensor | None = None  # float {0, 1}: AEPO's high-entropy window starts
    kl_relaxed: Tensor | None = None  # float {0, 1}: AEPO's KL-relaxed tokens (eq. 1's W^valid)
    paec_mask: Tensor | None = None  # PAEC's soft position mask m (eq. 10)


@dataclass(slots=True)
class BatchMeta:
    """Batch-level values, shared by every row selection of the batch."""

    tokenizer: PreTrainedTokenizerBase | None = None  # the run's tokenizer (AEPO's trigger vocabulary)
    step_groups: int | None = None  # the step's groups over all ranks (the same on every rank)


@dataclass(slots=True)
class RolloutBatch:
    prompt_ids: Tensor  # [N, P] left-padded
    prompt_mask: Tensor  # [N, P] long
    response_ids: Tensor  # [N, R] right-padded with a valid id (pad)
    response_mask: Tensor  # [N, R] float32 {0, 1}
    group: Tensor  # [N] local group index (responses of one prompt share it)
    seq: SequenceValues = field(default_factory=SequenceValues)
    tok: TokenValues = field(default_factory=TokenValues)
    meta: BatchMeta = field(default_factory=BatchMeta)
    vision: list[VisionInputs | None] | None = None  # [N] per row (None: a text row); None: no row has images

    def __len__(self) -> int:
        return self.response_ids.shape[0]

    @property
    def n_tokens(self) -> Tensor:
        return self.response_mask.sum(-1)

    def rows(self, index: Tensor | slice) -> RolloutBatch:
        """Rows ``index`` with the padding columns they do not need trimmed away (the same ``meta``)."""
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
            self.group[index], self.seq.mapped(lambda v: v[index]),
            self.tok.mapped(lambda v: v[index][:, :r_keep]), self.meta, vision,
        )  # fmt: skip

    def to(self, device) -> RolloutBatch:
        return RolloutBatch(
            self.prompt_ids.to(device), self.prompt_mask.to(device), self.response_ids.to(device),
            self.response_mask.to(device), self.group.to(device), self.seq.mapped(lambda v: v.to(device)),
            self.tok.mapped(lambda v: v.to(device)), self.meta,
            [v.to(device) if v is not None else None for v in self.vision] if self.vision is not None else None,
        )  # fmt: skip


def collate(groups, pad_id: int, processor=None) -> RolloutBatch:
    """Pad a list of :class:`~.rollout.Group` into one batch (its responses' rows per group, in order).

    A branch row whose ``context_len`` is k (entropy-triggered branching) carries its first k response
    tokens in the prompt part: context for the forward pass, no loss on them. ``seq.context_len`` holds k
    and ``seq.origin_row`` the row (in this batch; -1 for none) of the response it branched from, so
    per-trajectory statistics can see the whole trajectory (:mod:`.trajectory`). Groups with images get
    their pixel values through ``processor``."""
    prompts, responses, group_idx, context_len, origin_row = [], [], [], [], []
    for g_i, g in enumerate(groups):
        context = g.context_len or [0] * len(g.response_ids)
        origin = g.origin or [-1] * len(g.response_ids)
        first = len(prompts)
        for ids, k, o in zip(g.response_ids, context, origin, strict=True):
            prompts.append(list(g.prompt_ids) + list(ids[:k]))
            responses.append(list(ids[k:]))
            group_idx.append(g_i)
            context_len.append(k)
            origin_row.append(first + o if k > 0 and o >= 0 else -1)
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
    seq = SequenceValues(context_len=torch.tensor(context_len, dtype=torch.long),
                         origin_row=torch.tensor(origin_row, dtype=torch.long))  # fmt: skip
    return RolloutBatch(prompt_ids, prompt_mask, response_ids, response_mask,
                        torch.tensor(group_idx, dtype=torch.long), seq=seq, vision=vision)  # fmt: skip


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
    stats_path: str = "fused",
    packed: bool = False,
    model_inputs: dict | None = None,
):
    """One forward of ``model`` over ``mb`` and ONE chunked token-statistics pass over its real response
    positions; returns :class:`TokenStats` shaped [rows, R] (0 at padding).

    ``stats_path="fused"`` hands the final hidden states and the lm_head weight to ``fused_token_stats``
    inside the model's own lm_head call (:func:`ares_cli.models.heads.head_computes`): no [tokens x V] logits exist,
    in forward or backward. ``"logits"`` lets the model build the response logits and reduces those.
    ``packed`` concatenates the rows into one (:func:`~.micro_layout.packed_layout`); ``model_inputs`` (images of
    a VL model, ...) are passed to the model call as they are."""
    from ares_cli.algorithms.token_stats import TokenStats, fused_token_stats, token_stats
    from ares_cli.models.vision import forward_inputs
    from ares_cli.training.rl.micro_layout import packed_layout, padded_layout

    if packed and any(v is not None for v in (mb.vision or ())):
        from ares_cli.errors import UsageError

        raise UsageError("optim.pack_sequences does not support image prompts (3-D rotary positions)")
    layout = packed_layout(mb) if packed else padded_layout(mb)
    if not packed:  # positions (3-D with images) and pixel values
        model_inputs = {**forward_inputs(model, layout.inputs["input_ids"], layout.inputs["attention_mask"],
                                         mb.vision), **(model_inputs or {})}  # fmt: skip
    kw = dict(temperature=temperature if temperature > 0 else 1.0, top_p=top_p, top_k=top_k,
              chunk_size=chunk_size, stats=stats, entropy_grad=entropy_grad)  # fmt: skip
    call = {**layout.inputs, **(model_inputs or {}), "logits_to_keep": layout.keep, "use_cache": False}
    if stats_path == "fused":
        from ares_cli.models.heads import head_computes

        def head(hidden, weight, bias):
            flat = fused_token_stats(layout.select(hidden), weight, layout.targets, bias=bias, **kw)
            return torch.stack([getattr(flat, name).float() for name in stats], -1)

        with head_computes(model, head):
            packed_stats = model(**call).logits
        values = {name: packed_stats[..., i] for i, name in enumerate(stats)}
    elif stats_path == "logits":
        flat = token_stats(layout.select(model(**call).logits), layout.targets, **kw)
        values = {name: getattr(flat, name) for name in stats}
    else:
        raise ValueError(f"stats_path must be fused or logits, got {stats_path!r}")
    out = {name: layout.scatter(v.float()) for name, v in values.items()}
    if "nucleus_size" in out:
        out["nucleus_size"] = out["nucleus_size"].round().long()
    return TokenStats(**out)


def micro_slices(n: int, size: int) -> list[slice]:
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


def micro_plan(mb: RolloutBatch, *, rows: int, max_tokens: int | str | None = None, packed: bool = False,
               world_size: int = 1, equal_counts: bool = False) -> list[list[int]]:  # fmt: skip
    """Row indices of each micro-batch of ``mb`` (:func:`~ares_cli.training.micro_batches.plan_micro_batches`, ``auto`` for the device
    ``mb`` is on); with ``equal_counts`` every rank gets the same number of micro-batches (DeepSpeed ZeRO)."""
    from ares_cli.training.micro_batches import equalise, plan_micro_batches

    groups = plan_micro_batches(mb.prompt_mask.sum(-1).tolist(), mb.response_mask.sum(-1).long().tolist(),
                                rows=rows, max_tokens=max_tokens, packed=packed,
                                device=mb.prompt_ids.device.type)  # fmt: skip
    if equal_counts and world_size > 1:
        from ares_cli.training import distributed

        groups = equalise(groups, max(distributed.all_gather_json(len(groups))))
    return groups


@torch.no_grad()
def rollout_pass(
    model,
    batch: RolloutBatch,
    *,
    stats: tuple[str, ...],
    micro: int,
    prefix: str,
    max_tokens: int | str | None = None,
    packed: bool = False,
    equal_counts: bool = False,
    world_size: int = 1,
    **kw,
) -> None:
    """No-grad statistics of ``model`` over the whole batch, stored as the field ``prefix + name`` of
    ``batch.tok`` (``old_logprob``, ``ref_logprob``, ...: a :class:`TokenValues` field, else AttributeError)."""
    full: dict[str, Tensor] = {}
    plan = micro_plan(batch, rows=micro, max_tokens=max_tokens, packed=packed, world_size=world_size,
                      equal_counts=equal_counts)  # fmt: skip
    for idx in plan:
        index = torch.tensor(idx or [0], dtype=torch.long)  # CPU: indexes CPU and CUDA tensors alike
        out = forward_stats(model, batch.rows(index), stats=stats, packed=packed, **kw)
        if not idx:
            continue  # a zero-weight pass that keeps the ranks' collectives in step
        for name in stats:
            value = getattr(out, name).detach()
            if name not in full:
                full[name] = torch.zeros(batch.response_mask.shape, dtype=value.dtype, device=value.device)
            full[name][index, : value.shape[1]] = value
    for name, values in full.items():
        setattr(batch.tok, prefix + name, values.masked_fill(batch.response_mask == 0, 0))
