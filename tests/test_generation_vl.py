"""hf generation with images on a tiny random Qwen2.5-VL: batch independence, masks, positions, errors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ares_cli.errors import InputError  # noqa: E402
from ares_cli.generation import GenerationRequest, SamplingParams, get_backend, render_prompt  # noqa: E402


@pytest.fixture(scope="module")
def vl_backend(tiny_vl_dir):
    return get_backend("hf", tiny_vl_dir, batch_size=16, device="cpu")


def _requests(backend, images, n_seeds=2):
    proc = backend.processor
    reqs = []
    for i, imgs in enumerate([[images[0]], [images[1], images[2]], [], [images[3]], [images[2]]]):
        prompt = render_prompt(proc, f"what is {i}?", n_images=len(imgs))
        reqs.append(GenerationRequest(prompt=prompt, seeds=tuple(100 * i + s for s in range(n_seeds)),
                                      key=f"p{i}", images=tuple(str(p) for p in imgs)))  # fmt: skip
    return reqs


def test_prompt_has_one_placeholder_per_image_in_order(vl_backend, vl_images):
    prompt = render_prompt(vl_backend.processor, "q", n_images=2, system_prompt="s")
    assert prompt.count("<|vision_start|><|image_pad|><|vision_end|>") == 2
    assert prompt.index("<|image_pad|>") < prompt.index("q")
    ids, vision = vl_backend.encode_request(
        GenerationRequest(prompt=prompt, seeds=(0,), images=(str(vl_images[0]), str(vl_images[3])))
    )
    image_id = vl_backend.model.config.image_token_id
    merge = 4  # spatial_merge_size ** 2
    assert ids.count(image_id) == int(vision.image_grid_thw.prod(-1).sum()) // merge
    assert vision.image_grid_thw.shape == (2, 3)


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_batched_generation_with_images_equals_one_at_a_time(vl_backend, vl_images, temperature):
    sampling = SamplingParams(temperature=temperature, max_new_tokens=12)
    reqs = _requests(vl_backend, vl_images)
    batched = vl_backend.generate(reqs, sampling)
    for req, comps in zip(reqs, batched, strict=True):
        for seed, comp in zip(req.seeds, comps, strict=True):
            alone = vl_backend.generate([GenerationRequest(prompt=req.prompt, seeds=(seed,), key=req.key,
                                                           images=req.images)], sampling)[0][0]  # fmt: skip
            assert alone.token_ids == comp.token_ids
            assert alone.logprobs == pytest.approx(comp.logprobs, abs=1e-4)


def test_images_change_the_sample(vl_backend, vl_images):
    sampling = SamplingParams(temperature=1.0, max_new_tokens=16)
    prompt = render_prompt(vl_backend.processor, "q", n_images=1)
    outs = [vl_backend.generate([GenerationRequest(prompt=prompt, seeds=(7,), images=(str(p),))], sampling)[0][0]
            for p in (vl_images[0], vl_images[1])]  # fmt: skip
    logp = [sum(o.logprobs) for o in outs]
    assert outs[0].token_ids != outs[1].token_ids or logp[0] != pytest.approx(logp[1], abs=1e-6)


def test_vision_tokens_are_never_sampled(vl_backend, vl_images):
    model = vl_backend.model
    cfg = model.config
    banned = [cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id, cfg.vision_end_token_id]
    assert sorted(vl_backend.suppress_ids) == sorted(banned)
    with torch.no_grad():  # make the vision tokens overwhelmingly likely
        head = model.get_output_embeddings()
        saved = head.weight[banned].clone()
        head.weight[banned] = head.weight[banned] * 0 + 5.0 * head.weight.abs().max()
    try:
        reqs = _requests(vl_backend, vl_images, n_seeds=1)
        comps = vl_backend.generate(reqs, SamplingParams(temperature=1.0, max_new_tokens=8))
        assert all(not set(c.token_ids) & set(banned) for cs in comps for c in cs)
        assert all(len(c.token_ids) == 8 or c.finish_reason == "stop" for cs in comps for c in cs)
    finally:
        with torch.no_grad():
            head.weight[banned] = saved


def test_prefill_uses_3d_positions_that_match_the_models_own(vl_backend, vl_images):
    """Our explicit positions give the same logits as the model's own rope index path (one row, no pad)."""
    from ares_cli.models.vision import forward_inputs

    req = _requests(vl_backend, vl_images)[1]
    ids, vision = vl_backend.encode_request(req)
    input_ids = torch.tensor([ids])
    mask = torch.ones_like(input_ids)
    inputs = forward_inputs(vl_backend.model, input_ids, mask, [vision])
    assert inputs["position_ids"].shape == (3, 1, len(ids))
    assert not torch.equal(inputs["position_ids"][1], inputs["position_ids"][0])  # really 3-D
    from ares_cli.models.vision import mm_token_type_ids

    with torch.no_grad():
        ours = vl_backend.model(input_ids=input_ids, attention_mask=mask, **inputs).logits
        vl_backend.model.model.rope_deltas = None
        theirs = vl_backend.model(input_ids=input_ids, attention_mask=mask, pixel_values=vision.pixel_values,
                                  image_grid_thw=vision.image_grid_thw,
                                  mm_token_type_ids=mm_token_type_ids(vl_backend.model, input_ids)).logits  # fmt: skip
        vl_backend.model.model.rope_deltas = None
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_text_model_given_images_is_an_input_error(tiny_model_dir, vl_images):
    backend = get_backend("hf", tiny_model_dir, batch_size=4, device="cpu")
    req = GenerationRequest(prompt="<s>hi", seeds=(0,), key="q1", images=(str(vl_images[0]),))
    with pytest.raises(InputError, match="text-only") as info:
        backend.generate([req], SamplingParams(max_new_tokens=2))
    assert info.value.exit_code == 3 and info.value.field == "images"
