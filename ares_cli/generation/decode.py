"""The batched KV-cache decode loop behind the `hf` backend (imports torch; load it lazily).

Each row draws its randomness from its own `torch.Generator` seeded by the row's seed: the uniforms for
all steps are drawn up front (one per step), and a token is chosen by inverse-CDF lookup. A row's text
therefore depends only on (prompt, images, seed, sampling), not on which other rows share the batch.

Rows with images (a vision-language model) bring their pixel patches to the prefill and get the model's
3-D rotary positions there (:func:`ares_cli.models.vision.forward_inputs`); decode steps then continue
from each row's next position. Vision special tokens are masked out of every step's distribution.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ares_cli.models.vision import VisionInputs, forward_inputs, next_positions


@dataclass
class RowResult:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


def row_uniforms(seeds: Sequence[int], steps: int, device: torch.device) -> torch.Tensor:
    """(rows, steps) uniforms in [0, 1); row i comes only from a generator seeded with seeds[i]."""
    out = torch.empty(len(seeds), steps, dtype=torch.float64)
    for i, seed in enumerate(seeds):
        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        out[i] = torch.rand(steps, generator=gen, dtype=torch.float64)
    return out.to(device)


def choose_tokens(logits: torch.Tensor, u: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Pick one token per row: argmax when temperature is 0, else inverse-CDF sampling with nucleus top_p."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p < 1.0:
        probs, order = probs.sort(dim=-1, descending=True)
        before = probs.cumsum(dim=-1) - probs  # mass strictly ahead of each token; the top token always stays
        probs = probs.masked_fill(before >= top_p, 0.0)
    else:
        order = None
    cdf = probs.cumsum(dim=-1)
    target = (u * cdf[:, -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)
    return idx if order is None else order.gather(-1, idx.unsqueeze(-1)).squeeze(-1)


def _forward_kwargs(model) -> tuple[str, str | None]:
    """Names of the cache and logits-to-keep arguments across transformers 4.x/5.x."""
    params = inspect.signature(model.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
    return cache_kw, keep_kw


def _new_cache(model, capacity: int):
    """A KV cache for ``capacity`` positions, allocated once (:mod:`.kv_cache`); transformers' growing
    ``DynamicCache`` where the installed version has no per-layer cache classes."""
    try:
        from ares_cli.generation.kv_cache import preallocated_cache

        return preallocated_cache(model, capacity)
    except (ImportError, TypeError):  # transformers < 4.56
        from transformers import DynamicCache

        return DynamicCache()


def _left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids.to(device), mask.to(device)


def _suppress(logits: torch.Tensor, banned: torch.Tensor) -> torch.Tensor:
    return logits.index_fill_(-1, banned, float("-inf")) if banned.numel() else logits


@torch.inference_mode()
def decode_chunk(
    model,
    prompts: Sequence[Sequence[int]],
    seeds: Sequence[int],
    *,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    eos_ids: set[int],
    pad_id: int,
    stop_hit: Callable[[list[int]], bool] | None = None,
    vision: Sequence[VisionInputs | None] | None = None,
    suppress_ids: Sequence[int] = (),
) -> list[RowResult]:
    """Sample one continuation per (prompt, seed) row with a shared KV cache.

    ``vision`` gives each row's images (None for a text row). Identical prompts (same ids and images) in
    the chunk are prefilled once and their cache rows copied. Finished rows are dropped from the cache, the
    mask and the next step's inputs. ``suppress_ids`` can never be sampled.
    """
    device = next(model.parameters()).device
    vision = list(vision) if vision is not None else [None] * len(prompts)
    unique: dict[tuple, int] = {}
    first: list[VisionInputs | None] = []
    row_src = []
    for p, v in zip(prompts, vision, strict=True):
        key = (tuple(p), v.key if v is not None else None)
        if key not in unique:
            unique[key] = len(unique)
            first.append(v)
        row_src.append(unique[key])
    ids, mask = _left_pad([k[0] for k in unique], pad_id, device)
    inputs = forward_inputs(model, ids, mask, first)
    cache_kw, keep_kw = _forward_kwargs(model)
    cache = _new_cache(model, ids.shape[1] + max_new_tokens)
    extra = {keep_kw: 1} if keep_kw else {}
    out = model(input_ids=ids, attention_mask=mask, use_cache=True, **inputs, **{cache_kw: cache}, **extra)
    src = torch.tensor(row_src, dtype=torch.long, device=device)
    if len(unique) != len(prompts) or row_src != list(range(len(prompts))):
        cache.batch_select_indices(src)
    banned = torch.tensor(sorted(set(suppress_ids)), dtype=torch.long, device=device)
    logits = _suppress(out.logits[src, -1].float(), banned)
    mask, next_pos = mask[src], next_positions(inputs["position_ids"])[src]
    uniforms = row_uniforms(seeds, max_new_tokens, device) if temperature > 0 else None

    active = list(range(len(prompts)))  # original row index of each live batch row
    gen_ids: list[list[int]] = [[] for _ in prompts]
    gen_lp: list[list[float]] = [[] for _ in prompts]
    results: list[RowResult | None] = [None] * len(prompts)
    for step in range(max_new_tokens):
        u = uniforms[active, step] if uniforms is not None else None
        tokens = choose_tokens(logits, u, temperature, top_p)
        lps = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        keep: list[int] = []
        for b, (row, tok, lp) in enumerate(zip(active, tokens.tolist(), lps.tolist(), strict=True)):
            gen_ids[row].append(tok)
            gen_lp[row].append(lp)
            if tok in eos_ids or (stop_hit is not None and stop_hit(gen_ids[row])):
                results[row] = RowResult(gen_ids[row], gen_lp[row], "stop")
            elif step + 1 == max_new_tokens:
                results[row] = RowResult(gen_ids[row], gen_lp[row], "length")
            else:
                keep.append(b)
        if not keep:
            break
        if len(keep) != len(active):
            sel = torch.tensor(keep, dtype=torch.long, device=device)
            cache.batch_select_indices(sel)
            tokens, mask, next_pos = tokens[sel], mask[sel], next_pos[sel]
            active = [active[b] for b in keep]
        mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=-1)
        out = model(
            input_ids=tokens.unsqueeze(-1),
            attention_mask=mask,
            position_ids=next_pos.unsqueeze(-1),
            use_cache=True,
            **{cache_kw: cache},
        )
        logits, next_pos = _suppress(out.logits[:, -1].float(), banned), next_pos + 1
    return results  # type: ignore[return-value]
