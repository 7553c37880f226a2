"""token_stats / fused_token_stats against a naive reference (full softmax + full sort)."""

from __future__ import annotations

import math

import pytest
import torch

from ares_cli.algorithms.token_stats import (
    ALL_STATS,
    TokenStats,
    fused_token_stats,
    response_logits,
    select_response,
    token_stats,
)


def naive_stats(logits, targets, *, temperature=1.0, top_p=0.85, top_k=10000):
    """Full softmax + full descending sort; autograd provides the gradients."""
    x = logits.float() / temperature
    logp = torch.log_softmax(x, -1)
    p = logp.exp()
    logprob = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(p * logp).sum(-1)
    sv, _ = torch.sort(logp, -1, descending=True)
    cum = sv.exp().cumsum(-1)
    n = ((cum < top_p).sum(-1) + 1).clamp(max=min(top_k, x.shape[-1]))
    if top_p >= 1:
        n = torch.full_like(n, min(top_k, x.shape[-1]))
    inside = torch.arange(x.shape[-1]) < n.unsqueeze(-1)
    v = sv.masked_fill(~inside, float("-inf"))
    logq = torch.log_softmax(v, -1).masked_fill(~inside, 0.0)
    hn = -(logq.exp() * inside * logq).sum(-1)
    gap = sv[..., 0] - sv[..., 1]
    return TokenStats(logprob, entropy, hn, n, gap)


def make_logits(kind, shape, v, seed=0):
    g = torch.Generator().manual_seed(seed)
    if kind == "random":
        return torch.randn(*shape, v, generator=g) * 3
    if kind == "flat":
        return torch.randn(*shape, v, generator=g) * 0.01
    if kind == "peaked":  # Zipf-like: one dominant token, a power-law tail
        ranks = torch.arange(1, v + 1, dtype=torch.float32)
        base = -1.2 * ranks.log()
        perm = torch.stack([torch.randperm(v, generator=g) for _ in range(math.prod(shape))])
        out = base[perm].view(*shape, v) * 4 + torch.randn(*shape, v, generator=g) * 0.3
        return out
    raise ValueError(kind)


def assert_stats_close(a, b, atol=1e-5):
    for f in ALL_STATS:
        x, y = getattr(a, f), getattr(b, f)
        if f == "nucleus_size":
            assert torch.equal(x.long(), y.long()), f
        else:
            torch.testing.assert_close(x, y, atol=atol, rtol=1e-5, msg=f)


@pytest.mark.parametrize("kind", ["random", "peaked", "flat"])
@pytest.mark.parametrize("v", [50, 700])
def test_matches_naive_values(kind, v):
    logits = make_logits(kind, (3, 7), v)
    targets = torch.randint(0, v, (3, 7), generator=torch.Generator().manual_seed(1))
    for top_p, top_k in [(0.85, 10000), (0.5, 10000), (0.95, 30), (1.0, 10000)]:
        got = token_stats(logits, targets, top_p=top_p, top_k=top_k, chunk_size=5)
        ref = naive_stats(logits, targets, top_p=top_p, top_k=top_k)
        assert_stats_close(got, ref)
        assert got.nucleus_size.dtype == torch.long and got.logprob.shape == (3, 7)


def test_growth_path_matches_naive():
    # flat logits over 5000 tokens: nucleus ~ 4250 > 64, 256, 1024 -> exercises every growth step and the cap
    logits = make_logits("flat", (4,), 5000)
    targets = torch.zeros(4, dtype=torch.long)
    for top_k in (10000, 300, 64, 1):
        got = token_stats(logits, targets, top_k=top_k, chunk_size=3)
        assert_stats_close(got, naive_stats(logits, targets, top_k=top_k))
    assert int(token_stats(logits, targets).nucleus_size.min()) > 1024


def test_temperature():
    logits = make_logits("random", (6,), 300)
    targets = torch.arange(6)
    got = token_stats(logits, targets, temperature=0.7)
    assert_stats_close(got, naive_stats(logits, targets, temperature=0.7))


def test_hand_computed_small():
    # p = (0.5, 0.3, 0.2): H = -(.5 ln .5 + .3 ln .3 + .2 ln .2); top_p = 0.85 -> nucleus {0.5, 0.3, 0.2} (0.8 < .85)
    p = torch.tensor([[0.5, 0.3, 0.2]])
    logits = p.log()
    s = token_stats(logits, torch.tensor([1]), top_p=0.85)
    h = -(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2))
    assert s.entropy.item() == pytest.approx(h, abs=1e-6)
    assert s.logprob.item() == pytest.approx(math.log(0.3), abs=1e-6)
    assert s.nucleus_size.item() == 3 and s.nucleus_entropy.item() == pytest.approx(h, abs=1e-6)
    assert s.top2_gap.item() == pytest.approx(math.log(0.5 / 0.3), abs=1e-6)
    # top_p = 0.8 -> nucleus {0.5, 0.3}: renormalised (5/8, 3/8)
    s = token_stats(logits, torch.tensor([1]), top_p=0.8 - 1e-6)
    q = (5 / 8, 3 / 8)
    assert s.nucleus_size.item() == 2
    assert s.nucleus_entropy.item() == pytest.approx(-sum(x * math.log(x) for x in q), abs=1e-6)


def test_single_token_nucleus_has_zero_entropy_and_gradient():
    logits = torch.tensor([[10.0, 0.0, -1.0, -2.0]], requires_grad=True)
    s = token_stats(logits, torch.tensor([0]), top_p=0.85)
    assert s.nucleus_size.item() == 1 and s.nucleus_entropy.item() == 0.0
    assert math.isfinite(s.top2_gap.item()) and s.top2_gap.item() == pytest.approx(10.0)
    s.nucleus_entropy.sum().backward()
    assert torch.equal(logits.grad, torch.zeros_like(logits))
    one = token_stats(torch.zeros(2, 1), torch.zeros(2, dtype=torch.long))
    assert one.entropy.abs().max() == 0 and torch.isinf(one.top2_gap).all() and (one.nucleus_size == 1).all()


@pytest.mark.parametrize("kind", ["random", "peaked", "flat"])
def test_gradients_match_naive(kind):
    base = make_logits(kind, (2, 5), 400, seed=3).double().float()
    targets = torch.randint(0, 400, (2, 5), generator=torch.Generator().manual_seed(4))
    w = torch.randn(3, 2, 5, generator=torch.Generator().manual_seed(5))

    def run(fn, **kw):
        x = base.clone().requires_grad_(True)
        s = fn(x, targets, temperature=0.9, **kw)
        (w[0] * s.logprob + w[1] * s.entropy + w[2] * s.nucleus_entropy).sum().backward()
        return x.grad

    g_ref = run(naive_stats)
    g_got = run(lambda x, t, **kw: token_stats(x, t, chunk_size=3, entropy_grad=True, **kw))
    torch.testing.assert_close(g_got, g_ref, atol=1e-5, rtol=1e-4)


def test_entropy_grad_flag_and_nondifferentiable_outputs():
    x = make_logits("random", (4,), 100).requires_grad_(True)
    s = token_stats(x, torch.zeros(4, dtype=torch.long))
    assert s.logprob.requires_grad and s.nucleus_entropy.requires_grad
    assert not s.entropy.requires_grad and not s.nucleus_size.requires_grad and not s.top2_gap.requires_grad
    assert token_stats(x, torch.zeros(4, dtype=torch.long), entropy_grad=True).entropy.requires_grad


def test_stats_selection_only_computes_requested():
    x = make_logits("random", (4,), 100)
    s = token_stats(x, torch.zeros(4, dtype=torch.long), stats=("logprob", "entropy"))
    assert s.nucleus_entropy is None and s.nucleus_size is None and s.top2_gap is None
    ref = naive_stats(x, torch.zeros(4, dtype=torch.long))
    torch.testing.assert_close(s.entropy, ref.entropy)
    g = token_stats(x, torch.zeros(4, dtype=torch.long), stats=("top2_gap",))
    assert g.logprob is None
    torch.testing.assert_close(g.top2_gap, ref.top2_gap)
    with pytest.raises(ValueError):
        token_stats(x, torch.zeros(4, dtype=torch.long), stats=("bogus",))


def test_chunk_size_does_not_change_results():
    x = make_logits("peaked", (3, 11), 300)
    t = torch.randint(0, 300, (3, 11), generator=torch.Generator().manual_seed(0))
    outs = []
    for cs in (1, 4, 7, 33, 1000):
        xx = x.clone().requires_grad_(True)
        s = token_stats(xx, t, chunk_size=cs)
        (s.logprob.sum() + s.nucleus_entropy.sum()).backward()
        outs.append((s, xx.grad))
    for s, g in outs[1:]:
        assert_stats_close(s, outs[0][0], atol=1e-6)
        torch.testing.assert_close(g, outs[0][1], atol=1e-6, rtol=0)


def test_bf16_logits_computed_in_float32():
    x = make_logits("random", (2, 6), 500).bfloat16()
    t = torch.randint(0, 500, (2, 6), generator=torch.Generator().manual_seed(0))
    assert_stats_close(token_stats(x, t), naive_stats(x.float(), t))
    xx = x.clone().requires_grad_(True)
    token_stats(xx, t).logprob.sum().backward()
    assert xx.grad.dtype == torch.bfloat16


def test_neg_inf_logits_are_handled():
    x = make_logits("random", (3,), 50)
    x[:, 10:] = float("-inf")
    t = torch.tensor([0, 1, 2])
    assert_stats_close(token_stats(x, t), naive_stats(x[:, :10], t))


def test_nucleus_matches_plain_loop():
    x = make_logits("random", (9,), 60, seed=7)
    s = token_stats(x, torch.zeros(9, dtype=torch.long), top_p=0.7)
    for i in range(9):  # PAEC eq. 5-6 by a plain python loop
        probs = sorted(torch.softmax(x[i].double(), -1).tolist(), reverse=True)
        mass, k = 0.0, 0
        while mass < 0.7:
            mass += probs[k]
            k += 1
        q = [pp / sum(probs[:k]) for pp in probs[:k]]
        assert s.nucleus_size[i].item() == k
        assert s.nucleus_entropy[i].item() == pytest.approx(-sum(a * math.log(a) for a in q), abs=1e-5)


def test_fused_matches_logits_path_values_and_grads():
    g = torch.Generator().manual_seed(0)
    h0 = torch.randn(2, 6, 16, generator=g)
    w0 = torch.randn(300, 16, generator=g) * 0.5
    b0 = torch.randn(300, generator=g) * 0.1
    t = torch.randint(0, 300, (2, 6), generator=g)

    def loss(s):
        return (s.logprob * 0.7 + s.entropy * 0.3 - s.nucleus_entropy * 1.3).sum()

    h1, w1, b1 = (a.clone().requires_grad_(True) for a in (h0, w0, b0))
    ref = token_stats(h1 @ w1.t() + b1, t, temperature=0.8, entropy_grad=True)
    loss(ref).backward()
    h2, w2, b2 = (a.clone().requires_grad_(True) for a in (h0, w0, b0))
    got = fused_token_stats(h2, w2, t, bias=b2, temperature=0.8, entropy_grad=True, chunk_size=5)
    loss(got).backward()
    assert_stats_close(got, ref)
    for a, b in ((h1, h2), (w1, w2), (b1, b2)):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4)


def test_select_response_alignment():
    class Out:
        def __init__(self, logits):
            self.logits = logits

    ids = torch.tensor([[5, 6, 7, 8, 9]])
    logits = torch.arange(5).float().view(1, 5, 1).expand(1, 5, 3)
    lg, tg = response_logits(Out(logits), ids, 2)
    assert lg[0, :, 0].tolist() == [2.0, 3.0] and tg.tolist() == [[8, 9]]
    # logits_to_keep = R + 1: only the last 3 positions were computed
    lg2, _ = select_response(logits[:, -3:], ids, 2)
    assert torch.equal(lg2, lg)
    with pytest.raises(ValueError):
        select_response(logits, ids, 5)


def test_bad_targets_rejected():
    with pytest.raises(ValueError):
        token_stats(torch.zeros(2, 4), torch.tensor([0, 4]))
    with pytest.raises(ValueError):
        token_stats(torch.zeros(2, 4), torch.tensor([0]))


def test_no_full_sort_and_topk_grows_only_as_needed(monkeypatch):
    ks = []
    real_topk = torch.topk

    def spy_topk(x, k, *a, **kw):
        ks.append((x.shape[0], x.shape[-1], k))
        return real_topk(x, k, *a, **kw)

    def forbidden(*a, **kw):
        raise AssertionError("full sort used")

    monkeypatch.setattr(torch, "topk", spy_topk)
    monkeypatch.setattr(torch, "sort", forbidden)
    monkeypatch.setattr(torch, "argsort", forbidden)
    peaked = make_logits("peaked", (8,), 5000)
    token_stats(peaked, torch.zeros(8, dtype=torch.long))
    assert ks and all(width <= 1000 for _, width, _ in ks)  # level 1: only the p >= 1e-3 candidates
    ks.clear()
    mixed = torch.cat([peaked[:7], make_logits("flat", (1,), 5000)])
    token_stats(mixed, torch.zeros(8, dtype=torch.long), chunk_size=8)
    grown = [(rows, k) for rows, width, k in ks if width == 5000]
    assert grown == [(1, 64), (1, 256), (1, 1024), (1, 4096), (1, 5000)]  # only the flat row grows


def test_sampled_threshold_level_matches_naive(monkeypatch):
    # vocabulary >= 4 x top_k: capped flat rows are settled from a sampled threshold, never by topk(V)
    logits = torch.cat([make_logits("flat", (6,), 20000), make_logits("peaked", (2,), 20000)])
    logits[0, :5000] += 0.05  # a row whose nucleus lies below the cap
    targets = torch.randint(0, 20000, (8,), generator=torch.Generator().manual_seed(2))
    real_topk = torch.topk
    full_width = []

    def spy_topk(x, k, *a, **kw):
        if x.shape[-1] == 20000 and k > 2:
            full_width.append(k)
        return real_topk(x, k, *a, **kw)

    monkeypatch.setattr(torch, "topk", spy_topk)
    for top_p, top_k in ((0.85, 1000), (1.0, 1000), (0.85, 4000)):
        got = token_stats(logits, targets, top_p=top_p, top_k=top_k)
        assert_stats_close(got, naive_stats(logits, targets, top_p=top_p, top_k=top_k))
    assert full_width == []


def test_logprobs_exact_against_float64_and_nucleus_sizes_agree():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_token_stats.py"
    spec = importlib.util.spec_from_file_location("bench_token_stats", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    logits = bench.make_logits("peaked", 256, 32768, seed=3)
    g = torch.Generator().manual_seed(0)
    x64 = logits.double()
    logp64 = torch.log_softmax(x64, -1)
    targets = torch.multinomial(logp64.exp(), 1, generator=g).squeeze(-1)  # sampled, as responses are
    got = token_stats(logits, targets)
    assert (got.logprob.double() - logp64.gather(-1, targets[:, None]).squeeze(-1)).abs().max() <= 2e-6
    assert (got.entropy.double() + (logp64.exp() * logp64).sum(-1)).abs().max() <= 2e-6
    cum = logp64.exp().sort(-1, descending=True).values.cumsum(-1)
    assert torch.equal(got.nucleus_size, (cum < 0.85).sum(-1) + 1)
    rare = torch.randint(0, 32768, (256,), generator=g)  # log-probs near -35: float32 spacing is 4e-6
    err = (token_stats(logits, rare).logprob.double() - logp64.gather(-1, rare[:, None]).squeeze(-1)).abs()
    assert (err / logp64.gather(-1, rare[:, None]).squeeze(-1).abs().clamp(min=1)).max() <= 2e-7
    bf = logits.bfloat16()  # bf16 inputs: computed in float32
    ref_bf = torch.log_softmax(bf.double(), -1).gather(-1, targets[:, None]).squeeze(-1)
    assert (token_stats(bf, targets).logprob.double() - ref_bf).abs().max() <= 2e-6
