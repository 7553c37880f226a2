"""ares_cli.models: the right auto class, dtype, processor, freezing by name, trunk/lm_head access."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ares_cli import models  # noqa: E402
from ares_cli.errors import UsageError  # noqa: E402
from ares_cli.toy.tiny_vl import VLShape, mrope_section, save_tiny_vl  # noqa: E402


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-vl")
    save_tiny_vl(out, seed=0)
    return out


def test_text_model_loads_causal_lm_without_processor(tiny_model_dir):
    model = models.load_model(tiny_model_dir)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert next(model.parameters()).dtype == torch.float32
    assert not models.is_vision_language(tiny_model_dir)
    assert models.load_processor(tiny_model_dir) is None
    assert models.load_model(tiny_model_dir, dtype="bf16").dtype == torch.bfloat16


def test_vl_model_loads_image_text_class_with_processor(vl_dir):
    model = models.load_model(vl_dir)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert models.is_vision_language(vl_dir)
    proc = models.load_processor(vl_dir, min_pixels=28 * 28, max_pixels=28 * 28 * 4)
    assert proc.image_processor.size["longest_edge"] == 28 * 28 * 4
    tok = proc.tokenizer
    cfg = model.config
    assert cfg.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert cfg.vision_start_token_id == tok.convert_tokens_to_ids("<|vision_start|>")
    head_dim = cfg.text_config.hidden_size // cfg.text_config.num_attention_heads
    assert sum(cfg.text_config.rope_parameters["mrope_section"]) == head_dim // 2


def test_resolve_dtype_rejects_unknown():
    assert models.resolve_dtype(None, "cpu") == torch.float32
    assert models.resolve_dtype("auto", "cuda:0") == torch.bfloat16
    with pytest.raises(UsageError):
        models.resolve_dtype("int3", "cpu")


@pytest.mark.parametrize("head_dim", [8, 16, 64, 128])
def test_mrope_sections_sum_to_half_head_dim(head_dim):
    assert sum(mrope_section(head_dim)) == head_dim // 2
    assert mrope_section(128) == [16, 24, 24]  # Qwen2.5-VL's own split


def test_freezing_tower_with_and_without_merger(vl_dir):
    model = models.load_model(vl_dir)
    frozen = models.freeze_vision_tower(model)
    names = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert names == {n for n, _ in model.named_parameters() if n.startswith("model.visual.")}
    assert frozen == sum(p.numel() for n, p in model.named_parameters() if n in names)
    model = models.load_model(vl_dir)
    models.freeze_vision_tower(model, train_merger=True)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(".merger." in n for n in trainable)
    assert not any(n.startswith("model.visual.blocks") for n in trainable)


def test_hidden_states_times_lm_head_give_logits(vl_dir, tiny_model_dir):
    from PIL import Image

    model = models.load_model(vl_dir).eval()
    proc = models.load_processor(vl_dir)
    text = proc.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "2+2"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    enc = proc(text=[text], images=[Image.new("RGB", (50, 40), (10, 200, 30))], return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
        hidden = models.final_hidden_states(model, **enc)
    assert torch.allclose(hidden @ models.lm_head_weight(model).T, logits, atol=1e-5)
    text_model = models.load_model(tiny_model_dir).eval()
    ids = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad():
        logits = text_model(input_ids=ids).logits
        hidden = models.final_hidden_states(text_model, input_ids=ids)
    assert torch.allclose(hidden @ models.lm_head_weight(text_model).T, logits, atol=1e-5)


def test_tiny_vl_is_deterministic_in_seed(tmp_path):
    a = save_tiny_vl(tmp_path / "a", VLShape(), seed=3)
    b = save_tiny_vl(tmp_path / "b", VLShape(), seed=3)
    assert all(
        torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )
