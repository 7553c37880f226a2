"""One chunked pass of per-token statistics over the policy's next-token distributions.

For every response position t with temperature-scaled logits z_t / T (ARES appendix B) it gives:

- ``logprob``: log pi(o_t) = z_{o_t}/T - logsumexp(z/T), the sampled token's log-probability;
- ``entropy``: H_t = -sum_j p_j log p_j over the full vocabulary (ARES eq. 3);
- ``nucleus_entropy``: H'_t of the renormalised top-p nucleus (PAEC eq. 5-6), the nucleus being the
  smallest prefix of the descending distribution whose mass reaches ``top_p`` (PAEC sec. 3.1), capped at
  ``top_k`` tokens (PAEC table 4: p = 0.85, cap 10 000); ``top_p = 1`` means the whole vocabulary (capped),
  not a float-rounding-dependent prefix;
- ``nucleus_size``: |V_t^(p)| (int64);
- ``top2_gap``: log pi(1) - log pi(2) (PAEC eq. 8's Delta; the ratio is the same under the full and the
  renormalised distribution). When the nucleus holds one token PAEC has no second candidate: we still
  return the full-distribution gap (finite), and ``nucleus_size == 1`` tells the consumer; V = 1 gives +inf.

Normalisation: log p = d - log sum exp(d) with d = x - max(x), computed in float32 (bf16/fp16 inputs are
upcast block by block): measured against float64, sampled-token log-prob errors stay below 2e-6 (torch's
CPU ``log_softmax`` is ~70x worse and flips nucleus sizes near the top_p boundary).

Memory: positions are processed in chunks of ``chunk_size`` (the fused path builds one chunk's logits at a
time), and each chunk in blocks of at most 2^22 float32 elements through two work buffers reused for the
whole call, so the float32 temporaries are ~32 MiB whatever the number of tokens. The nucleus never sorts
the vocabulary (:mod:`ares_cli.algorithms.nucleus`).

Gradients come from a custom autograd function that saves only per-token scalars and recomputes each
chunk in backward, so autograd never holds [tokens x V] float32 either. ``logprob`` and
``nucleus_entropy`` carry gradient (PAEC needs dH'/dtheta); ``entropy`` only with ``entropy_grad=True``;
``nucleus_size`` and ``top2_gap`` never. Analytic gradients with x = z/T, log p = log_softmax(x):
d logprob/dx = onehot(o_t) - p;  dH/dx = -p (log p + H);  dH'/dx_S = -q (log q + H') on the nucleus S
(q the renormalised nucleus distribution) and 0 elsewhere; dz = dx / T.

``fused_token_stats`` does the same from hidden states and the lm_head weight, computing the logits of
one chunk at a time (forward and backward), so full logits are never stored.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ares_cli.algorithms.nucleus import nucleus_dist, nucleus_stats, top2_gap

__all__ = [
    "ALL_STATS", "DEFAULT_CHUNK_SIZE", "BLOCK_ELEMS", "TokenStats", "token_stats", "fused_token_stats",
    "select_response", "response_logits"
]  # fmt: skip

ALL_STATS = ("logprob", "entropy", "nucleus_entropy", "nucleus_size", "top2_gap")
DEFAULT_CHUNK_SIZE = 128
BLOCK_ELEMS = 1 << 22  # float32 elements of one work block (16 MiB): rows x vocabulary


@dataclass
class TokenStats:
    """Per-position statistics, each shaped like ``targets`` ([..., T]); ``None`` if not requested."""

    logprob: Tensor | None = None
    entropy: Tensor | None = None
    nucleus_entropy: Tensor | None = None
    nucleus_size: Tensor | None = None
    top2_gap: Tensor | None = None


@dataclass(frozen=True)
class _Cfg:
    temperature: float
    top_p: float
    top_k: int
    chunk_size: int
    want: frozenset
    entropy_grad: bool


def _make_cfg(temperature, top_p, top_k, chunk_size, stats, entropy_grad) -> _Cfg:
    if isinstance(stats, str):
        stats = (stats,)
    unknown = sorted(set(stats) - set(ALL_STATS))
    if unknown or not stats:
        raise ValueError(f"stats must be a non-empty subset of {ALL_STATS}, got {tuple(stats)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if top_k < 1 or chunk_size < 1:
        raise ValueError(f"top_k and chunk_size must be >= 1, got {top_k}, {chunk_size}")
    return _Cfg(float(temperature), float(top_p), int(top_k), int(chunk_size), frozenset(stats), entropy_grad)


class _Workspace:
    """Two float32 [rows, V] buffers reused by every block of one call (their pages are touched once)."""

    def __init__(self, chunk_size: int, v: int, device):
        self.rows = max(1, min(chunk_size, BLOCK_ELEMS // max(v, 1)))
        self.a = torch.empty(self.rows, v, device=device)
        self.b = torch.empty(self.rows, v, device=device)

    def blocks(self, n: int):
        return ((s, min(s + self.rows, n)) for s in range(0, n, self.rows))


def _block_max(x: Tensor) -> Tensor | None:
    """Maxima of consecutive blocks of 64 (or 32, 16) logits of each row: [rows, V / b]; None if no such
    block size divides V. The nucleus search scans these instead of the whole vocabulary."""
    v = x.shape[-1]
    b = next((b for b in (64, 32, 16) if v % b == 0 and v >= 4 * b), None)
    return None if b is None else x.reshape(x.shape[0], v // b, b).amax(-1)


def _shifted(z: Tensor, cfg: _Cfg, ws: _Workspace):
    """d = z/T - max(z/T) and e = exp(d) in float32 (in the workspace), s0 = sum(e), log s0, and the
    block maxima of d (:func:`_block_max`).

    log p = d - log s0 exactly up to float32 rounding of d and s0 (no log_softmax kernel)."""
    d, e = ws.a[: z.shape[0]], ws.b[: z.shape[0]]
    src = z
    if z.dtype != torch.float32:
        src = d.copy_(z)
    if cfg.temperature != 1.0:
        src = torch.div(src, cfg.temperature, out=d)
    bmax = _block_max(src)
    m = (bmax if bmax is not None else src).amax(-1, keepdim=True)
    m = m.masked_fill_(~torch.isfinite(m), 0.0)
    torch.sub(src, m, out=d)
    torch.exp(d, out=e)
    s0 = e.sum(-1)
    return d, e, s0, s0.log(), (bmax.sub_(m) if bmax is not None else None)


def _forward_block(z: Tensor, y: Tensor, cfg: _Cfg, ws: _Workspace) -> dict[str, Tensor]:
    """All requested statistics of one block of logits ``z`` (any float dtype) at targets ``y``."""
    d, e, s0, log_s0, bmax = _shifted(z, cfg, ws)
    out: dict[str, Tensor] = {}
    if "logprob" in cfg.want:
        out["logprob"] = d.gather(-1, y.unsqueeze(-1)).squeeze(-1) - log_s0
    if cfg.want & {"nucleus_entropy", "nucleus_size"}:
        out["nucleus_size"], out["nucleus_entropy"], out["top2_gap"] = nucleus_stats(
            d, e, s0, log_s0, cfg.top_p, cfg.top_k, bmax
        )
    elif "top2_gap" in cfg.want:
        out["top2_gap"] = top2_gap(d)
    if "entropy" in cfg.want:  # H = log s0 - sum(e d) / s0 (ARES eq. 3); e * d overwrites e
        prod = e.mul_(d)
        dot = prod.sum(-1)
        bad = torch.isnan(dot)  # -inf logits: 0 * -inf; those terms are 0
        if bad.any():
            dot[bad] = prod[bad].nan_to_num_(nan=0.0).sum(-1)
        out["entropy"] = log_s0 - dot / s0
    return out


def _grad_block(z, y, h, hn, n, g_lp, g_h, g_hn, cfg: _Cfg, ws: _Workspace) -> Tensor:
    """d(sum_t g_lp logprob + g_h H + g_hn H')/dz for one block (formulas in the module docstring).

    The result is a float32 view of the workspace: consume it before the next block."""
    d, e, s0, log_s0, _ = _shifted(z, cfg, ws)
    logp = d.sub_(log_s0.unsqueeze(-1))
    nuc = None
    if g_hn is not None and n.numel():
        vals, idx = torch.topk(logp, int(n.max()), dim=-1, sorted=True)  # the same set as in forward
        q, logq, _ = nucleus_dist(vals, n)
        nuc = (idx, -(q * (logq + hn.unsqueeze(-1))) * g_hn.unsqueeze(-1))
    p = e.div_(s0.unsqueeze(-1))
    coef = g_lp.unsqueeze(-1) if g_lp is not None else torch.zeros_like(logp[:, :1])
    if g_h is not None:
        gx = logp.add_(h.unsqueeze(-1)).mul_(g_h.unsqueeze(-1)).add_(coef).mul_(p).neg_()
    else:
        gx = p.mul_(coef).neg_()
    if g_lp is not None:
        gx.scatter_add_(-1, y.unsqueeze(-1), g_lp.unsqueeze(-1))
    if nuc is not None:
        gx.scatter_add_(-1, *nuc)
    return gx if cfg.temperature == 1.0 else gx.div_(cfg.temperature)


_OUT = ("logprob", "entropy", "nucleus_entropy", "nucleus_size", "top2_gap")


def _run_forward(ctx, n_rows: int, v: int, chunk_z, y: Tensor, cfg: _Cfg, device) -> tuple[tuple, list]:
    """Chunked forward; returns the five outputs (empty tensors where not requested) and the per-token
    scalars backward needs (H, H', nucleus size). ``chunk_z(s, e)`` gives rows [s, e) of the logits."""
    parts: dict[str, list[Tensor]] = {}
    ws = _Workspace(cfg.chunk_size, v, device)
    for s in range(0, n_rows, cfg.chunk_size):
        e = min(s + cfg.chunk_size, n_rows)
        z = chunk_z(s, e)
        for bs, be in ws.blocks(e - s):
            for key, val in _forward_block(z[bs:be], y[s + bs : s + be], cfg, ws).items():
                parts.setdefault(key, []).append(val)
    del ws
    full = {k: torch.cat(v) for k, v in parts.items() if v}

    def get(k: str) -> Tensor:
        return full[k] if k in full else torch.empty(0, device=device)

    outs = tuple(get(k) if k in cfg.want else torch.empty(0, device=device) for k in _OUT)
    nondiff = [outs[3], outs[4]] + [o for k, o in zip(_OUT, outs, strict=True) if k not in cfg.want]
    if not cfg.entropy_grad and "entropy" in cfg.want:
        nondiff.append(outs[1])
    ctx.mark_non_differentiable(*nondiff)
    ctx.cfg = cfg
    return outs, [get("entropy"), get("nucleus_entropy"), get("nucleus_size")]


def _grads_in(ctx, g_lp, g_h, g_hn):
    cfg = ctx.cfg
    g_lp = g_lp if "logprob" in cfg.want else None
    g_h = g_h if ("entropy" in cfg.want and cfg.entropy_grad) else None
    g_hn = g_hn if "nucleus_entropy" in cfg.want else None
    return g_lp, g_h, g_hn


def _run_backward(n_rows: int, v: int, chunk_z, consume, y, h, hn, n, g_lp, g_h, g_hn, cfg, device):
    """Chunk by chunk: recompute the logits, form the float32 gradient wrt them block by block and hand
    it to ``consume(row_start, row_end, grad_block)``."""
    ws = _Workspace(cfg.chunk_size, v, device)
    for s in range(0, n_rows, cfg.chunk_size):
        e = min(s + cfg.chunk_size, n_rows)
        z = chunk_z(s, e)
        for bs, be in ws.blocks(e - s):
            sl = slice(s + bs, s + be)
            gx = _grad_block(
                z[bs:be], y[sl], h[sl] if g_h is not None else None,
                hn[sl] if g_hn is not None else None, n[sl] if g_hn is not None else None,
                None if g_lp is None else g_lp[sl], None if g_h is None else g_h[sl],
                None if g_hn is None else g_hn[sl], cfg, ws,
            )  # fmt: skip
            consume(sl, gx)


class _TokenStatsFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits2d: Tensor, y: Tensor, cfg: _Cfg):
        with torch.no_grad():
            outs, saved = _run_forward(
                ctx, logits2d.shape[0], logits2d.shape[1], lambda s, e: logits2d[s:e], y, cfg, logits2d.device
            )
        ctx.save_for_backward(logits2d, y, *saved)
        return outs

    @staticmethod
    def backward(ctx, g_lp, g_h, g_hn, _g_n, _g_gap):
        logits2d, y, h, hn, n = ctx.saved_tensors
        cfg = ctx.cfg
        g_lp, g_h, g_hn = _grads_in(ctx, g_lp, g_h, g_hn)
        grad = torch.zeros_like(logits2d)
        if g_lp is None and g_h is None and g_hn is None:
            return grad, None, None

        def consume(sl, gx):
            grad[sl] = gx

        _run_backward(logits2d.shape[0], logits2d.shape[1], lambda s, e: logits2d[s:e], consume,
                      y, h, hn, n, g_lp, g_h, g_hn, cfg, logits2d.device)  # fmt: skip
        return grad, None, None


def _linear(h: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return torch.nn.functional.linear(h, weight, bias)


class _FusedFn(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, hidden2d: Tensor, weight: Tensor, bias: Tensor | None, y: Tensor, cfg: _Cfg):
        with torch.no_grad():
            outs, saved = _run_forward(
                ctx, hidden2d.shape[0], weight.shape[0], lambda s, e: _linear(hidden2d[s:e], weight, bias),
                y, cfg, hidden2d.device,
            )  # fmt: skip
        ctx.save_for_backward(hidden2d, weight, bias, y, *saved)
        return outs

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, g_lp, g_h, g_hn, _g_n, _g_gap):
        hidden2d, weight, bias, y, h, hn, n = ctx.saved_tensors
        cfg = ctx.cfg
        g_lp, g_h, g_hn = _grads_in(ctx, g_lp, g_h, g_hn)
        need_h, need_w, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        grad_h = torch.zeros_like(hidden2d) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if need_b else None
        if g_lp is None and g_h is None and g_hn is None:
            return grad_h, _cast(grad_w, weight), _cast(grad_b, bias), None, None

        def consume(sl, gz):
            if need_h:
                grad_h[sl] = (gz.to(weight.dtype) @ weight).to(grad_h.dtype)
            if need_w:
                grad_w.addmm_(gz.t(), hidden2d[sl].float())
            if need_b:
                grad_b.add_(gz.sum(0))

        with torch.no_grad():
            _run_backward(hidden2d.shape[0], weight.shape[0], lambda s, e: _linear(hidden2d[s:e], weight, bias),
                          consume, y, h, hn, n, g_lp, g_h, g_hn, cfg, hidden2d.device)  # fmt: skip
        return grad_h, _cast(grad_w, weight), _cast(grad_b, bias), None, None


def _cast(g: Tensor | None, like: Tensor | None) -> Tensor | None:
    return None if g is None or like is None else g.to(like.dtype)


def _check_targets(targets: Tensor, lead: torch.Size, v: int, needs_targets: bool) -> Tensor:
    if tuple(targets.shape) != tuple(lead):
        raise ValueError(f"targets shape {tuple(targets.shape)} != logits leading shape {tuple(lead)}")
    y = targets.reshape(-1).long()
    if needs_targets and y.numel() and (int(y.min()) < 0 or int(y.max()) >= v):
        raise ValueError(f"targets must lie in [0, {v}); padding positions need a valid id (mask later)")
    return y


def _wrap(outs: tuple[Tensor, ...], lead: torch.Size, cfg: _Cfg) -> TokenStats:
    return TokenStats(
        **{k: (o.view(lead) if k in cfg.want else None) for k, o in zip(_OUT, outs, strict=True)}
    )


def token_stats(
    logits: Tensor,
    targets: Tensor,
    *,
    temperature: float = 1.0,
    top_p: float = 0.85,
    top_k: int = 10000,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    stats: tuple[str, ...] = ALL_STATS,
    entropy_grad: bool = False,
) -> TokenStats:
    """Statistics of ``logits`` [..., T, V] at ``targets`` [..., T] (positions already aligned).

    Any float dtype (bf16/fp16 are upcast to float32 per chunk). ``stats`` picks what to compute (GRPO
    needs only ``("logprob", "entropy")``); the rest are ``None``. See the module docstring for the
    equations and the gradient contract."""
    cfg = _make_cfg(temperature, top_p, top_k, chunk_size, stats, entropy_grad)
    lead, v = logits.shape[:-1], logits.shape[-1]
    y = _check_targets(targets, lead, v, "logprob" in cfg.want)
    return _wrap(_TokenStatsFn.apply(logits.reshape(-1, v), y, cfg), lead, cfg)


def fused_token_stats(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    bias: Tensor | None = None,
    temperature: float = 1.0,
    top_p: float = 0.85,
    top_k: int = 10000,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    stats: tuple[str, ...] = ALL_STATS,
    entropy_grad: bool = False,
) -> TokenStats:
    """``token_stats(hidden @ weight.T + bias, targets, ...)`` without ever storing the logits.

    ``hidden`` [..., T, D] are the final hidden states of the response positions (see
    :func:`select_response`), ``weight`` [V, D] the lm_head weight. Logits of one chunk of positions
    are computed in the weight's dtype (as the model's lm_head would), upcast to float32, reduced, and
    recomputed in backward; gradients flow to ``hidden``, ``weight`` and ``bias`` (weight/bias
    gradients accumulate in float32)."""
    cfg = _make_cfg(temperature, top_p, top_k, chunk_size, stats, entropy_grad)
    lead, d = hidden.shape[:-1], hidden.shape[-1]
    if weight.dim() != 2 or weight.shape[1] != d:
        raise ValueError(f"weight must be [V, {d}], got {tuple(weight.shape)}")
    y = _check_targets(targets, lead, weight.shape[0], "logprob" in cfg.want)
    return _wrap(_FusedFn.apply(hidden.reshape(-1, d), weight, bias, y, cfg), lead, cfg)


def select_response(x, input_ids: Tensor, response_length: int) -> tuple[Tensor, Tensor]:
    """Positions that predict the last ``response_length`` tokens of ``input_ids`` [B, L].

    ``x`` is a causal LM's per-position output [B, L', ...] (logits or final hidden states; an HF output
    object with ``.logits`` is accepted) whose last position is L - 1 (L' may be shorter than L, e.g.
    with ``logits_to_keep=response_length + 1``). Position t predicts token t + 1, so the result is
    ``x[:, -R-1:-1]`` (a view, no copy) and the targets ``input_ids[:, -R:]``; right-padded responses
    keep their padding, to be masked by the caller."""
    x = x.logits if hasattr(x, "logits") else x
    r = int(response_length)
    if r < 1 or r >= input_ids.shape[1] or x.shape[1] < r + 1:
        raise ValueError(
            f"response_length {r} does not fit inputs {tuple(input_ids.shape)} / {tuple(x.shape)}"
        )
    return x[:, -r - 1 : -1], input_ids[:, -r:]


def response_logits(output, input_ids: Tensor, response_length: int) -> tuple[Tensor, Tensor]:
    """Response-position logits [B, R, V] and targets [B, R] from an HF causal LM output (or logits)."""
    return select_response(output, input_ids, response_length)
