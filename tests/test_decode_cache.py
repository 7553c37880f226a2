"""The decode loop's preallocated KV cache gives the tokens and log-probs of transformers' growing cache."""

from __future__ import annotations

import torch


def test_preallocated_layer_matches_the_growing_layer_through_updates_and_row_drops():
    from transformers.cache_utils import DynamicLayer

    from ares_cli.generation.kv_cache import PreallocatedLayer

    gen = torch.Generator().manual_seed(0)
    grow, pre = DynamicLayer(), PreallocatedLayer(capacity=10)
    steps = [torch.randn(4, 2, 5, 3, generator=gen)] + [
        torch.randn(4, 2, 1, 3, generator=gen) for _ in range(2)
    ]
    for i, k in enumerate(steps + [torch.randn(2, 2, 1, 3, generator=gen) for _ in range(3)]):
        if i == 3:  # rows 1 and 3 finished: the rows that stay move down within the same buffers
            buffers = pre._k, pre._v
            for layer in (grow, pre):
                layer.batch_select_indices(torch.tensor([0, 2]))
            assert pre._k is buffers[0] and pre._v is buffers[1] and pre.keys.shape[0] == 2
        a, b = grow.update(k, -k), pre.update(k, -k)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert grow.get_seq_length() == pre.get_seq_length()
    assert (
        pre._k.shape[-2] == 10 and pre.get_seq_length() == 10
    )  # 5 + 5 x 1: filled, never reallocated to grow
    more = torch.randn(2, 2, 4, 3, generator=gen)  # past the planned size: the buffer grows, values stay
    assert torch.equal(grow.update(more, more)[0], pre.update(more, more)[0])


def test_preallocated_layer_repeats_and_reorders_rows_like_the_growing_layer():
    """Shared prefills copy a cache row to several batch rows; a reorder moves them: both reallocate."""
    from transformers.cache_utils import DynamicLayer

    from ares_cli.generation.kv_cache import PreallocatedLayer

    gen = torch.Generator().manual_seed(2)
    grow, pre = DynamicLayer(), PreallocatedLayer(capacity=12)
    k = torch.randn(3, 2, 4, 3, generator=gen)
    grow.update(k, -k), pre.update(k, -k)
    for index in ([0, 0, 1, 2, 2], [4, 1, 0, 3], [1, 3]):
        for layer in (grow, pre):
            layer.batch_select_indices(torch.tensor(index))
        step = torch.randn(len(index), 2, 1, 3, generator=gen)
        a, b = grow.update(step, step), pre.update(step, step)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_decode_tokens_identical_with_the_preallocated_cache(tiny_model_dir, monkeypatch):
    from transformers import DynamicCache

    from ares_cli.generation import decode
    from ares_cli.generation.kv_cache import PreallocatedLayer
    from ares_cli.models import load_model

    model = load_model(tiny_model_dir).eval()
    assert isinstance(decode._new_cache(model, 16).layers[0], PreallocatedLayer)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(5, 90, (int(n),), generator=gen).tolist() for n in torch.randint(3, 12, (6,))]
    prompts += prompts[:2]  # shared prefills: their cache rows are copied
    kw = dict(temperature=1.0, top_p=0.9, max_new_tokens=24, eos_ids={7, 11, 13}, pad_id=0)

    def run():
        return decode.decode_chunk(model, prompts, list(range(len(prompts))), **kw)

    fast = run()
    monkeypatch.setattr(decode, "_new_cache", lambda m, capacity: DynamicCache(config=m.config))
    slow = run()
    assert len({len(r.token_ids) for r in slow}) > 2  # rows finish at different steps (rows are dropped)
    assert [r.token_ids for r in fast] == [r.token_ids for r in slow]
    assert [r.logprobs for r in fast] == [r.logprobs for r in slow]
    assert [r.finish_reason for r in fast] == [r.finish_reason for r in slow]
