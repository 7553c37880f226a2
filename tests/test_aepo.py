"""AEPO detection: window entropy (eq. 4), threshold (sec. 3.2.1), HWE mask (eq. 12-13), trigger words
(appendix H) and difficulty buckets (appendix G, eq. 9-10), against hand-computed values."""

import math

import numpy as np
import pytest
import torch

from ares_cli.algorithms.aepo import (
    AEPOConfig,
    batch_threshold,
    count_hwe,
    hwe_mask,
    masked_row_quantile,
    trigger_mask,
    trigger_token_ids,
    window_entropy,
)
from ares_cli.algorithms.buckets import EASY, HARD, MEDIUM, bucket_bounds, bucket_ids, difficulty_bucket
from ares_cli.errors import UsageError


def test_eq4_window_entropy_paper_full_response():
    h = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    out = window_entropy(h, torch.ones_like(h), window=2)
    # (1+2)/2, (2+3)/2, (3+4)/2, (4+5)/2, last position: only itself is left
    assert torch.allclose(out, torch.tensor([[1.5, 2.5, 3.5, 4.5, 5.0]]))


def test_eq4_window_entropy_end_rule_and_padding_never_counted():
    h = torch.tensor([[1.0, 2.0, 3.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    out = window_entropy(h, mask, window=3)
    # t0: (1+2+3)/3 = 2; t1: (2+3)/2 = 2.5 (window shrinks at the end); t2: 3; padding -> 0
    assert torch.allclose(out, torch.tensor([[2.0, 2.5, 3.0, 0.0, 0.0]]))


def test_eq4_window_entropy_next_mode_reference_reading():
    h = torch.tensor([[1.0, 2.0, 3.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    out = window_entropy(h, mask, window=2, mode="next")
    # t0: (2+3)/2; t1: 3 (only t2 follows); t2: no successor -> own H_t = 3
    assert torch.allclose(out, torch.tensor([[2.5, 3.0, 3.0, 0.0, 0.0]]))


def test_eq4_window_of_one_is_token_entropy():
    h = torch.rand(3, 7)
    mask = (torch.arange(7) < torch.tensor([[7], [3], [0]])).long()
    assert torch.allclose(window_entropy(h, mask, window=1), h * mask)


def test_row_quantile_linear_interpolation_matches_numpy():
    g = torch.Generator().manual_seed(0)
    vals = torch.rand(6, 40, generator=g, dtype=torch.float64)
    lens = torch.tensor([40, 1, 2, 17, 0, 33])
    mask = torch.arange(40)[None] < lens[:, None]
    for q in (0.0, 0.5, 0.8, 0.95, 1.0):
        got, has = masked_row_quantile(vals, mask, q)
        for i, n in enumerate(lens.tolist()):
            if n == 0:
                assert not has[i] and got[i] == 0
            else:
                assert got[i].item() == pytest.approx(np.percentile(vals[i, :n].numpy(), 100 * q))


def test_sec321_threshold_mean_and_median_of_row_quantiles():
    h = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 4.0, 7.0, 7.0, 7.0], [0.0, 0.0, 0.0, 0.0, 10.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]])
    # per-row 95th percentiles: 4 + 0.8*1 = 4.8; 2 + 0.95*2 = 3.9; 0 + 0.8*10 = 8
    assert batch_threshold(h, mask).item() == pytest.approx((4.8 + 3.9 + 8.0) / 3)
    assert batch_threshold(h, mask, reduce="median").item() == pytest.approx(4.8)
    # an all-padding row is excluded from the mean
    h2 = torch.cat([h, torch.full((1, 5), 100.0)])
    m2 = torch.cat([mask, torch.zeros(1, 5, dtype=torch.long)])
    assert batch_threshold(h2, m2).item() == pytest.approx((4.8 + 3.9 + 8.0) / 3)


def test_sec321_threshold_all_reduce_makes_mean_global():
    h = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    mask = torch.ones_like(h)
    # two identical ranks: sums double, the mean stays 4.8
    assert batch_threshold(h, mask, all_reduce=lambda t: 2 * t).item() == pytest.approx(4.8)


def test_threshold_beyond_torch_quantile_limit():
    n = 2**24 + 8  # torch.quantile refuses inputs this large
    h = torch.arange(n, dtype=torch.float32)[None]
    got = batch_threshold(h, torch.ones_like(h, dtype=torch.bool), quantile=0.5)
    assert got.item() == pytest.approx((n - 1) / 2, rel=1e-6)


def test_eq12_eq13_hwe_mask_and_count():
    w = torch.tensor([[2.0, 2.5, 3.0, 0.0], [1.0, 9.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    m = hwe_mask(w, mask, 2.5)
    assert m.tolist() == [[False, True, True, False], [False, True, False, False]]
    assert count_hwe(m).tolist() == [2.0, 1.0]
    # padding never counts, even when the threshold is <= 0
    assert count_hwe(hwe_mask(w, mask, -1.0)).tolist() == [3.0, 2.0]


def test_appendix_h_trigger_vocabulary_uses_sampled_token():
    w = torch.tensor([[3.0, 3.0, 3.0]])
    trig = trigger_mask(torch.tensor([[5, 7, 9]]), {9, 5})
    assert trig.tolist() == [[True, False, True]]
    assert count_hwe(hwe_mask(w, torch.ones(1, 3), 2.0, trigger=trig)).tolist() == [2.0]


class _FakeTokenizer:
    vocab = ["<s>", " However", "but,", " the", "Therefore", " wait", "x", "butter"]

    def __len__(self):
        return len(self.vocab)

    def decode(self, ids, skip_special_tokens=True):
        text = self.vocab[ids[0]]
        return "" if skip_special_tokens and text == "<s>" else text


def test_appendix_h_trigger_token_ids_from_word_list():
    ids = trigger_token_ids(_FakeTokenizer(), ["however", "But", "therefore", "wait"])
    assert ids == {1, 2, 4, 5}


@pytest.mark.parametrize(
    "n_correct, expected",
    [(0, "hard"), (1, "hard"), (2, "hard"), (3, "medium"), (4, "medium"), (5, "medium"), (6, "easy"),
     (7, "easy"), (8, "easy")],
)  # fmt: skip
def test_eq10_buckets_for_eight_samples(n_correct, expected):
    assert difficulty_bucket(n_correct, 8) == expected


def test_eq10_bucket_rules_scale_with_group_size():
    assert bucket_bounds(8) == (6, 2)
    assert bucket_bounds(4) == (3, 1)
    assert bucket_bounds(16) == (12, 4)
    assert bucket_bounds(1) == (1, 0)
    assert [difficulty_bucket(c, 4) for c in range(5)] == ["hard", "hard", "medium", "easy", "easy"]
    ids = bucket_ids(torch.tensor([0, 4, 8, 2]), 8)
    assert ids.tolist() == [HARD, MEDIUM, EASY, HARD]
    with pytest.raises(UsageError):
        difficulty_bucket(9, 8)


def test_config_defaults_are_the_papers():
    cfg = AEPOConfig()
    assert (cfg.window, cfg.quantile, cfg.easy_pass_frac, cfg.hard_pass_frac) == (4, 0.95, 0.75, 0.25)
    assert cfg.window_mode == "paper" and cfg.threshold_mode == "mean" and cfg.reward_variant == "paper"
    assert set(AEPOConfig.field_help()) >= {"window", "kl_rho", "target_source"}
    for bad in ({"window_mode": "x"}, {"window": 0}, {"target_source": "fixed"}, {"kl_rho": 0.0}):
        with pytest.raises(UsageError):
            AEPOConfig(**bad)
    assert math.isclose(AEPOConfig(target_source="fixed", target_fixed=(1, 2, 3)).target_fixed[2], 3)


def test_detect_hwe_pipeline_eq4_eq12_eq13_with_ema_and_trigger():
    from ares_cli.algorithms.aepo import detect_hwe
    from ares_cli.algorithms.controllers import ThresholdEMA

    h = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    mask = torch.ones_like(h)
    det = detect_hwe(h, mask, AEPOConfig(end_rule="shrink", window=2))
    # windows (1.5, 2.5, 3.5, 4.5, 5); tau = 4.8 -> only the last position (a shrunk window)
    assert det.batch_threshold.item() == pytest.approx(4.8) and det.n_he.tolist() == [1.0]
    ema = ThresholdEMA(0.5)
    ema.update(2.0)
    det = detect_hwe(h, mask, AEPOConfig(end_rule="shrink", window=2, threshold_mode="ema"), ema=ema)
    assert det.threshold.item() == pytest.approx(3.4) and det.hwe.tolist() == [[False] * 2 + [True] * 3]
    cfg = AEPOConfig(
        end_rule="shrink", window=2, threshold_mode="ema", use_trigger_vocab=True, trigger_words=("but",)
    )
    det = detect_hwe(h, mask, cfg, ema=ema, trigger=torch.tensor([[True, True, True, True, False]]))
    assert det.n_he.tolist() == [1.0]  # tau = 0.5*3.4 + 0.5*4.8 = 4.1 -> position 3 only
    with pytest.raises(UsageError):
        detect_hwe(h, mask, AEPOConfig(threshold_mode="ema"))


def test_eq4_garbage_at_padding_never_leaks():
    h = torch.tensor([[1.0, 3.0, float("nan"), float("inf")]])
    mask = torch.tensor([[1, 1, 0, 0]])
    assert window_entropy(h, mask, window=4).tolist() == [[2.0, 3.0, 0.0, 0.0]]
    assert batch_threshold(h, mask, quantile=0.5).item() == 2.0


def test_sec321_median_threshold_is_global_across_ranks():
    """Two ranks holding different rows take the same τ: the median of *all* rows' quantiles."""
    g = torch.Generator().manual_seed(5)
    h = torch.rand(7, 12, generator=g, dtype=torch.float64)
    mask = torch.arange(12)[None] < torch.tensor([12, 3, 9, 1, 12, 6, 0])[:, None]
    rows = [slice(0, 2), slice(2, 7)]  # rank 0: 2 rows, rank 1: 5 rows (one empty)
    from ares_cli.algorithms.aepo import detect_hwe

    quantiles = [masked_row_quantile(h[r], mask[r], 0.95) for r in rows]
    per_rank = [q[has].to(torch.float64) for q, has in quantiles]

    def gather(_mine):  # what all_gather returns on every rank: both ranks' rows, in rank order
        return torch.cat(per_rank)

    full = batch_threshold(h, mask, reduce="median")
    taus = [batch_threshold(h[r], mask[r], reduce="median", all_gather=gather) for r in rows]
    assert taus[0].item() == pytest.approx(full.item()) and taus[1].item() == pytest.approx(full.item())
    cfg = AEPOConfig(threshold_mode="median")
    dets = [detect_hwe(h[r], mask[r], cfg, all_gather=gather) for r in rows]
    assert dets[0].threshold.item() == pytest.approx(full.item()) == dets[1].threshold.item()
    # without the gather each rank would use its own rows' median
    assert batch_threshold(h[rows[0]], mask[rows[0]], reduce="median").item() != pytest.approx(full.item())


def test_eq12_full_window_end_rule_and_window_cover():
    from ares_cli.algorithms.aepo import full_window_starts, window_cover

    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]])
    # paper, w = 3: starts need t + 2 < L (L = 5: t <= 2; L = 2: none)
    assert full_window_starts(mask, 3).long().tolist() == [[1, 1, 1, 0, 0, 0], [0] * 6]
    # next, w = 2: t + 2 < L
    assert full_window_starts(mask, 2, "next").long().tolist() == [[1, 1, 1, 0, 0, 0], [0] * 6]
    starts = torch.tensor([[0, 1, 0, 0, 1, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    # paper, w = 3: start 1 covers 1-3, start 4 covers 4 (clipped to the response); row 2 covers 0-1
    assert window_cover(starts, mask, 3).long().tolist() == [[0, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]]
    # next, w = 2: start 1 covers 2-3, start 4 covers nothing inside the response
    assert window_cover(starts, mask, 2, "next").long().tolist() == [[0, 0, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]]


def test_end_rule_full_never_flags_a_shrunk_window():
    from ares_cli.algorithms.aepo import detect_hwe

    h = torch.tensor([[0.1, 0.1, 0.1, 0.1, 0.1, 3.0]])
    mask = torch.ones_like(h)
    shrink = detect_hwe(h, mask, AEPOConfig(window=3, quantile=0.88, end_rule="shrink"))
    full = detect_hwe(h, mask, AEPOConfig(window=3, quantile=0.88, end_rule="full"))
    # threshold 0.1 + 0.4 * 2.9 = 1.26; windows end [.., 1.07, 1.55, 3.0]: the last two are shrunk windows
    assert shrink.hwe[0].tolist() == [False, False, False, False, True, True]
    assert full.hwe[0].tolist() == [False] * 6 and AEPOConfig().end_rule == "full"
