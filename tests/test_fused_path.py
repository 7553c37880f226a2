"""stats_path=fused (hidden states through the model's own lm_head, chunked) against stats_path=logits:
every statistic within 1e-5 and every parameter gradient within 1e-5 (fp32), for a plain model, tied
embeddings, a vision-language model fed an image, and the RL image batch of the tiny Qwen2.5-VL builder."""

from __future__ import annotations

import pytest
import torch

from ares_cli.algorithms.token_stats import ALL_STATS

VOCAB = 300


def _batch(vocab: int = VOCAB, seed: int = 0, image_tokens: int = 0):
    from ares_cli.training.rl.batch import collate
    from ares_cli.training.rl.rollout import Group

    gen = torch.Generator().manual_seed(seed)
    groups = []
    for i in range(2):
        prompt = torch.randint(5, vocab - 10, (3 + 2 * i,), generator=gen).tolist()
        if image_tokens:  # <vision_start> <image> x n, as a VL processor would expand them
            prompt = [vocab - 3] + [vocab - 1] * image_tokens + prompt
        lens = torch.randint(1, 9, (3,), generator=gen).tolist()
        responses = [torch.randint(5, vocab - 10, (n,), generator=gen).tolist() for n in lens]
        groups.append(Group(i, f"p{i}", prompt, responses, ["stop"] * 3, ["correct", "incorrect", "correct"]))
    return collate(groups, pad_id=0)


def _llama(tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=tied, pad_token_id=0, bos_token_id=1, eos_token_id=2)  # fmt: skip
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # a peakier head than random init, so nuclei are small and varied
        model.model.norm.weight.mul_(12.0 if tied else 30.0)
    return model


def _vl():
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    cfg = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]}, bos_token_id=1,
                         eos_token_id=2, pad_token_id=0),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                           patch_size=2, spatial_merge_size=1, temporal_patch_size=1, in_channels=3,
                           window_size=4, fullatt_block_indexes=[0]),
        image_token_id=VOCAB - 1, video_token_id=VOCAB - 2, vision_start_token_id=VOCAB - 3,
        tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return Qwen2_5_VLForConditionalGeneration(cfg)


def _run(model, mb, path, model_inputs=None, **kw):
    from ares_cli.training.rl.batch import forward_stats

    model.zero_grad(set_to_none=True)
    stats = forward_stats(model, mb, stats=ALL_STATS, temperature=0.9, top_p=0.85, top_k=40, chunk_size=5,
                          entropy_grad=True, stats_path=path, model_inputs=model_inputs, **kw)  # fmt: skip
    m = mb.response_mask
    loss = ((0.7 * stats.logprob + 0.3 * stats.entropy - 1.3 * stats.nucleus_entropy) * m).sum() / m.sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return stats, grads


def _assert_same(a, b):
    (sa, ga), (sb, gb) = a, b
    for name in ALL_STATS:
        x, y = getattr(sa, name), getattr(sb, name)
        if name == "nucleus_size":
            assert torch.equal(x, y)
        else:
            torch.testing.assert_close(x, y, atol=1e-5, rtol=0, msg=name)
    assert ga.keys() == gb.keys() and len(ga) > 5
    for n in ga:
        torch.testing.assert_close(ga[n], gb[n], atol=1e-5, rtol=0, msg=n)


@pytest.mark.parametrize("tied", [False, True])
def test_fused_matches_logits_path(tied):
    model, mb = _llama(tied), _batch()
    logits = _run(model, mb, "logits")
    fused = _run(model, mb, "fused")
    _assert_same(fused, logits)
    sizes = logits[0].nucleus_size[mb.response_mask.bool()]
    assert sizes.min() >= 1 and sizes.max() > sizes.min()  # the nucleus really varies
    assert model.get_output_embeddings().forward.__func__ is torch.nn.Linear.forward  # head restored
    if tied:
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_fused_matches_logits_path_vision_language_model_with_an_image():
    model, mb = _vl(), _batch(image_tokens=4)
    n = len(mb)
    images = {  # one 2x2-patch image per row (4 image tokens after merging 1x1)
        "pixel_values": torch.randn(4 * n, 3 * 2 * 2, generator=torch.Generator().manual_seed(1)),
        "image_grid_thw": torch.tensor([[1, 2, 2]] * n),
        "position_ids": None,  # the model's own multimodal rope positions
    }
    _assert_same(_run(model, mb, "fused", images), _run(model, mb, "logits", images))
    grads = _run(model, mb, "fused", images)[1]
    assert any(k.startswith("model.visual") and g.abs().max() > 0 for k, g in grads.items())


def test_packed_rows_match_padded_rows():
    model, mb = _llama(False), _batch()
    _assert_same(_run(model, mb, "fused", packed=True), _run(model, mb, "logits"))


def test_fused_path_refuses_a_head_it_cannot_reproduce():
    from ares_cli.errors import UsageError
    from ares_cli.models.heads import output_head

    model = _llama(False)
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(UsageError, match="stats_path=logits"):
        output_head(model)


def test_fused_matches_logits_path_through_the_rl_image_batch(tiny_vl_dir, vl_images):
    """The RL batch of the tiny Qwen2.5-VL builder (processor, images per group, 3-D rotary positions)."""
    from test_vl_rl import vl_rl_batch

    from ares_cli.models import load_model

    model = load_model(tiny_vl_dir)
    mb = vl_rl_batch(tiny_vl_dir, vl_images)[3]
    assert mb.vision is not None
    _assert_same(_run(model, mb, "fused"), _run(model, mb, "logits"))
