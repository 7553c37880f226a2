"""Whole-trajectory views of a batch whose branch rows carry their shared prefix as context.

With entropy-triggered branching and ``prefix_tokens="context"`` (:mod:`.branching`), a branch row's response
part holds only its continuation o[t:]; its prefix o[:t] sits in the prompt part, untrained. The loss must
see only the continuation (the prefix is trained once, in the response that sampled it), but the quantities
the papers define *per trajectory* must see the whole trajectory o = o[:t] + o[t:]: a branch is a trajectory
of the batch (ARES sec. 3.2.1 "branches additional trajectories"), its reward is that trajectory's, so its
N_HE (eq. 13, summed over t = 1..L of the trajectory), its per-trajectory entropy quantile in the batch
threshold (sec. 3.2.1) and its length are the trajectory's; PAEC's soft-mask threshold is the ρ-quantile of
"the response's" scores (eq. 10), the response being the trajectory. The prefix positions' token statistics
are the origin row's: same context, same tokens, same (old) policy.

:func:`trajectory_view` builds [N, W] trajectory tensors (prefix from the origin row, then the row's own
response positions); :func:`own_positions` maps a trajectory tensor back to the row's trained positions
[N, R]. Rows without context (every row when branching is off) are unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor


def has_context(batch) -> bool:
    return batch.seq.context_len is not None and bool((batch.seq.context_len > 0).any())


def trajectory_view(
    values: Tensor, mask: Tensor, context_len: Tensor, origin_row: Tensor
) -> tuple[Tensor, Tensor]:
    """(values [N, W], mask [N, W]) of each row's whole trajectory: positions j < k_i come from the origin
    row's positions j, positions k_i + t from the row's own position t (k_i = ``context_len``, W = max(k_i +
    L_i)). ``origin_row`` is the origin's row in this batch (-1 where k_i = 0). Zero outside the mask."""
    n, r = mask.shape
    k = context_len.to(mask.device).long()[:, None]
    lengths = mask.bool().sum(1, keepdim=True)
    width = int((k + lengths).max()) if n else 0
    j = torch.arange(max(width, 1), device=mask.device)[None]
    prefix = j < k
    rows = torch.arange(n, device=mask.device)[:, None]
    src_row = torch.where(prefix, origin_row.to(mask.device).long()[:, None].clamp(min=0), rows)
    src_col = torch.where(prefix, j, j - k).clamp(0, max(r - 1, 0))
    full_mask = prefix | ((j >= k) & (j - k < lengths))
    full = values[src_row, src_col]
    zero = torch.zeros((), dtype=full.dtype, device=full.device)
    return torch.where(full_mask, full, zero), full_mask.to(mask.dtype)


def own_positions(full: Tensor, mask: Tensor, context_len: Tensor) -> Tensor:
    """The row's own (trained) positions [N, R] of a trajectory tensor [N, W]: out[i, t] = full[i, k_i + t]."""
    n, r = mask.shape
    k = context_len.to(mask.device).long()[:, None]
    cols = (k + torch.arange(r, device=mask.device)[None]).clamp(max=max(full.shape[1] - 1, 0))
    out = full.gather(1, cols)
    return torch.where(mask.bool(), out, torch.zeros((), dtype=out.dtype, device=out.device))


def view(batch, values: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`trajectory_view` of ``values`` [N, R] in ``batch`` (identity when no row has context)."""
    if not has_context(batch):
        return values, batch.response_mask
    return trajectory_view(values, batch.response_mask, batch.seq.context_len, batch.seq.origin_row)


def own(batch, full: Tensor) -> Tensor:
    """:func:`own_positions` of a trajectory tensor of ``batch`` (identity when no row has context)."""
    if not has_context(batch):
        return full
    return own_positions(full, batch.response_mask, batch.seq.context_len)
