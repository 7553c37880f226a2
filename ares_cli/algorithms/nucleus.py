"""The top-p nucleus of each row of a block of shifted logits, without sorting the vocabulary.

Input per row: d = x - max(x) (float32, <= 0), e = exp(d), s0 = sum(e), so p = e / s0. Output: the
nucleus size |V^(p)| (PAEC sec. 3.1, capped at ``top_k``; ``top_p = 1`` = the top ``top_k`` tokens), the
entropy H' of the renormalised nucleus (PAEC eq. 5-6) and the top-2 gap log pi(1) - log pi(2) (eq. 8).

The nucleus is a prefix of the descending distribution, so any prefix C = {j : p_j >= tau} whose mass
reaches ``top_p`` (or that holds ``top_k`` tokens) contains it. Three levels, each only for the rows the
previous one could not settle:

1. ``tau = 1e-3``: at most 1 000 candidates per row, found by one comparison pass; settles every row of a
   peaked (trained-LM-like) distribution;
2. a threshold at the estimated ``1.3 * top_k``-th largest logit, taken from a 1-in-16 strided sample of
   the row: settles the capped rows of flat distributions (the worst case) when at least ``top_k``
   candidates pass it;
3. ``torch.topk`` grown x4 from 64 up to ``top_k`` (exact for any row; small vocabularies go straight here).

Candidates are gathered into a small [rows, width] buffer and ordered there with ``torch.topk``; ties at a
threshold are all inside C, so every level returns the same values as a full sort would.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["TAU", "SAMPLE_STRIDE", "SAMPLE_MARGIN", "nucleus_dist", "nucleus_stats", "top2_gap"]

TAU = 1e-3  # level-1 probability threshold: <= 1/TAU candidates per row
SAMPLE_STRIDE = 16  # level-2 threshold estimated from every 16th logit
SAMPLE_MARGIN = 1.3  # aim the level-2 threshold at 1.3 x top_k candidates
K0, GROW = 64, 4  # level-3 topk sizes: 64, 256, 1024, ... up to top_k


def nucleus_dist(vals: Tensor, n: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Renormalised nucleus distribution (PAEC eq. 5) over the first n[r] of descending ``vals``.

    Returns (q, log q with 0 outside the nucleus, H' of PAEC eq. 6)."""
    inside = torch.arange(vals.shape[-1], device=vals.device) < n.unsqueeze(-1)
    v = vals.masked_fill(~inside, float("-inf"))
    logq = v - torch.logsumexp(v, -1, keepdim=True)
    logq = logq.masked_fill(~inside, 0.0)
    q = logq.exp() * inside
    return q, logq, -(q * logq).sum(-1)


def _pack(r: Tensor, vals: Tensor, c: int, k: int | None = None, ordered: bool = True) -> Tensor:
    """Values ``vals`` of rows ``r`` (grouped by row) as [c, width] in descending order, padded with -inf
    (only the largest ``k`` when given; in no particular order unless ``ordered``)."""
    counts = torch.bincount(r, minlength=c)
    width = max(int(counts.max()) if counts.numel() else 0, 1)
    pos = torch.arange(r.numel(), device=vals.device) - (counts.cumsum(0) - counts)[r]
    buf = torch.full((c, width), float("-inf"), dtype=vals.dtype, device=vals.device)
    buf[r, pos] = vals
    return torch.topk(buf, min(k or width, width), dim=-1, sorted=ordered).values


def _above(d: Tensor, td: Tensor, bmax: Tensor | None) -> Tensor:
    """Descending candidates {d >= td} of each row; with block maxima only their blocks are read."""
    c, v = d.shape
    if bmax is None:
        r, col = (d >= td.unsqueeze(-1)).nonzero(as_tuple=True)
        return _pack(r, d[r, col], c)
    rb, cb = (bmax >= td.unsqueeze(-1)).nonzero(as_tuple=True)
    vals = d.view(c, bmax.shape[1], -1)[rb, cb]
    keep = vals >= td[rb].unsqueeze(-1)
    return _pack(rb.unsqueeze(-1).expand_as(vals)[keep], vals[keep], c)


class _Result:
    def __init__(self, c: int, device, dtype):
        self.n = torch.zeros(c, dtype=torch.long, device=device)
        self.h = torch.zeros(c, dtype=dtype, device=device)
        self.gap = torch.full((c,), float("nan"), dtype=dtype, device=device)

    def settle(self, rows, vals: Tensor, log_s0: Tensor, top_p: float, kmax: int, force=False) -> Tensor:
        """Settle ``rows`` whose descending candidates ``vals`` hold the nucleus; returns a mask of them.

        A row is settled when its candidates' mass reaches ``top_p``, it has ``kmax`` candidates, or
        ``force`` (``vals`` are the row's top ``kmax`` logits, some possibly -inf)."""
        kk = min(vals.shape[-1], kmax)
        head = vals[:, :kk]
        cum = (head - log_s0.unsqueeze(-1)).exp().cumsum(-1)
        full = torch.isfinite(head[:, -1]) & (kk == kmax)
        done = full if top_p >= 1 else (cum[:, -1] >= top_p) | full
        done = done | force
        cnt = torch.full_like(rows, kk) if top_p >= 1 else ((cum < top_p).sum(-1) + 1).clamp_(max=kk)
        dr = rows[done]
        self.n[dr] = cnt[done]
        self.h[dr] = nucleus_dist(head[done], cnt[done])[2]
        if vals.shape[-1] >= 2:
            two = torch.isfinite(vals[:, 1]) & done
            self.gap[rows[two]] = vals[two, 0] - vals[two, 1]
        return done

    def cap(self, rows: Tensor, top: Tensor, log_s0: Tensor, top_p: float) -> Tensor:
        """Settle the rows whose top-k logits ``top`` (any order, all finite) hold less than ``top_p``
        (or ``top_p = 1``): the nucleus is all of them, its entropy needs no order; returns those rows."""
        done = (
            (top - log_s0.unsqueeze(-1)).exp().sum(-1) < top_p
            if top_p < 1
            else torch.ones_like(rows, dtype=torch.bool)
        )
        dr = rows[done]
        self.n[dr] = top.shape[-1]
        sel = top[done]
        w = sel - sel.amax(-1, keepdim=True)  # H' = log Z - sum(e^w w) / Z over the whole set
        ew = w.exp()
        z = ew.sum(-1)
        self.h[dr] = z.log() - ew.mul_(w).sum(-1) / z
        two = torch.topk(top[done], 2, dim=-1).values if top.shape[-1] >= 2 else None
        if two is not None:
            self.gap[dr] = two[:, 0] - two[:, 1]
        return done


def nucleus_stats(d: Tensor, e: Tensor, s0: Tensor, log_s0: Tensor, top_p: float, top_k: int,
                  bmax: Tensor | None = None):  # fmt: skip
    """(nucleus size, nucleus entropy H', top-2 gap) of each row; see the module docstring. ``bmax``: the
    maxima of equal blocks of each row of ``d`` (lets level 1 skip blocks below its threshold)."""
    c, v = d.shape
    kmax = min(top_k, v)
    res = _Result(c, d.device, d.dtype)
    rows = torch.arange(c, device=d.device)
    if top_p < 1 and kmax > K0:  # level 1: p >= TAU  <=>  d >= log TAU + log s0
        done = res.settle(rows, _above(d, math.log(TAU) + log_s0, bmax), log_s0, top_p, kmax)
        rows = rows[~done]
    if rows.numel() and v >= 2 * kmax:  # level 2: only large vocabularies with a binding cap
        dr = d if rows.numel() == c else d[rows]
        sample = dr[:, ::SAMPLE_STRIDE]
        j = min(int(SAMPLE_MARGIN * kmax / SAMPLE_STRIDE) + 8, sample.shape[1])
        t = torch.topk(sample, j, dim=-1, sorted=False).values.amin(-1, keepdim=True)
        r2, c2 = (dr >= t).nonzero(as_tuple=True)
        enough = torch.bincount(r2, minlength=dr.shape[0]) >= kmax
        if bool(enough.any()):
            keep = enough[r2]
            slot = torch.cumsum(enough, 0) - 1
            cand = _pack(slot[r2[keep]], dr[r2[keep], c2[keep]], int(enough.sum()), kmax, ordered=False)
            sub = rows[enough]
            done = res.cap(sub, cand, log_s0[sub], top_p)  # the top kmax hold < top_p: no order needed
            if not bool(done.all()):
                rest = ~done
                vals = torch.topk(cand[rest], kmax, dim=-1, sorted=True).values
                done[rest] = res.settle(sub[rest], vals, log_s0[sub[rest]], top_p, kmax)
            settled = torch.zeros_like(enough)
            settled[enough] = done
            rows = rows[~settled]
    k = min(K0 if top_p < 1 else kmax, kmax)
    while rows.numel():  # level 3
        k = min(max(k, 2), v)
        vals = torch.topk(d[rows], k, dim=-1, sorted=True).values
        rows = rows[~res.settle(rows, vals, log_s0[rows], top_p, kmax, force=k >= kmax)]
        k = min(k * GROW, max(kmax, 2))
    missing = torch.isnan(res.gap)
    if bool(missing.any()):
        res.gap[missing] = top2_gap(d[missing])
    return res.n, res.h, res.gap


def top2_gap(d: Tensor) -> Tensor:
    """log pi(1) - log pi(2) of each row (+inf with a one-token vocabulary)."""
    if d.shape[-1] < 2:
        return torch.full(d.shape[:-1], float("inf"), dtype=d.dtype, device=d.device)
    top = torch.topk(d, 2, dim=-1).values
    return top[..., 0] - top[..., 1]
