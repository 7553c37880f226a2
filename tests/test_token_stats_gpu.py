"""CUDA checks of the statistics paths (run by benchmarks/gpu/run.sh; skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_fused_matches_logits_path_on_cuda():
    from test_fused_path import _assert_same, _batch, _llama, _run

    model, mb = _llama(False).cuda(), _batch().to("cuda")
    _assert_same(_run(model, mb, "fused"), _run(model, mb, "logits"))
    _assert_same(_run(model, mb, "fused", packed=True), _run(model, mb, "logits"))


def test_bf16_logits_exact_to_float32_rounding_on_cuda():
    from ares_cli.algorithms.token_stats import fused_token_stats, token_stats

    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(512, 256, device="cuda", generator=g).bfloat16()
    w = (torch.randn(32000, 256, device="cuda", generator=g) * 0.2).bfloat16()
    logits = h @ w.t()
    logp64 = torch.log_softmax(logits.double(), -1)
    y = torch.multinomial(logp64.exp(), 1, generator=g).squeeze(-1)
    ref = logp64.gather(-1, y[:, None]).squeeze(-1)
    for stats in (token_stats(logits, y), fused_token_stats(h, w, y, chunk_size=100)):
        assert (stats.logprob.double() - ref).abs().max() <= 2e-6
        cum = logp64.exp().sort(-1, descending=True).values.cumsum(-1)
        assert torch.equal(stats.nucleus_size, (cum < 0.85).sum(-1) + 1)


def test_fused_backward_keeps_memory_below_the_logits():
    from ares_cli.algorithms.token_stats import fused_token_stats

    h = torch.randn(4096, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(65536, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, 65536, (4096,), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fused_token_stats(h, w, y, stats=("logprob", "entropy"), chunk_size=512).logprob.sum().backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    assert peak < 4096 * 65536 * 2  # less than one bf16 copy of the full logits
