"""The visual toy world: deterministic splits whose answers follow from their images, the VL base build."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest
from conftest import run_ares

from ares_cli.errors import InputError
from ares_cli.toy.teacher import TeacherConfig, last_boxed_int
from ares_cli.toy.vision_build import (
    encode_batch,
    vl_base_dir,
    vl_build_config,
    vl_prompt_messages,
    vl_trace,
)
from ares_cli.toy.vision_tasks import (
    IMAGE_SIZES,
    IMAGE_STATEMENT,
    MAX_VL_DIFFICULTY,
    PALETTE,
    VL_DATA_DIR,
    VL_SPLIT_SIZES,
    decode_colour_code,
    generate_vl_split,
    load_vl_split,
    regenerate_vl_splits,
    render_blank,
    render_colour,
    solve_vl,
)


def _image_bytes(split: str, record: dict) -> bytes:
    return (VL_DATA_DIR / record["images"][0]).read_bytes()


def test_rendering_round_trips_every_colour_and_size():
    rng = random.Random(0)
    for code in range(len(PALETTE)):
        for size in IMAGE_SIZES:
            for _ in range(5):  # the channel jitter never moves a colour to another code
                assert decode_colour_code(render_colour(code, size, rng)) == code
    with pytest.raises(InputError):
        render_colour(len(PALETTE), (56, 56), rng)


def test_generator_is_deterministic_and_regenerates_the_files_byte_for_byte(tmp_path):
    assert generate_vl_split("val", 40, 7) == generate_vl_split("val", 40, 7)
    assert generate_vl_split("val", 40, 7) != generate_vl_split("val", 40, 8)
    paths = regenerate_vl_splits(tmp_path)
    assert set(paths) == {"train", "val", "test", "test-blank"}
    for name, path in paths.items():
        assert path.read_bytes() == (VL_DATA_DIR / f"{name}.jsonl").read_bytes(), name
        for line in path.read_text().splitlines():
            image = json.loads(line)["images"][0]
            assert (tmp_path / image).read_bytes() == (VL_DATA_DIR / image).read_bytes(), image


@pytest.mark.parametrize("split", sorted(VL_SPLIT_SIZES))
def test_every_answer_follows_from_its_image(split):
    records = load_vl_split(split)
    assert len(records) == VL_SPLIT_SIZES[split]
    assert {r["meta"]["difficulty"] for r in records} == set(range(1, MAX_VL_DIFFICULTY + 1))
    needs = sum(r["meta"]["needs_image"] for r in records)
    assert 0.7 <= needs / len(records) <= 0.8
    for record in records:
        code = decode_colour_code(_image_bytes(split, record))
        assert str(solve_vl(record["problem"], code)) == record["answer"], record["id"]
        if record["meta"]["needs_image"]:
            assert record["problem"].startswith(IMAGE_STATEMENT)
            # another colour gives another answer: the image is needed
            assert str(solve_vl(record["problem"], (code + 1) % len(PALETTE))) != record["answer"]
        else:
            assert "x" not in record["problem"]
            assert {solve_vl(record["problem"], other) for other in range(len(PALETTE))} == {
                int(record["answer"])
            }


def test_splits_are_disjoint_and_the_blank_test_split_keeps_records_and_sizes():
    from PIL import Image

    keys = {}
    for split in VL_SPLIT_SIZES:
        keys[split] = {
            (r["problem"], decode_colour_code(_image_bytes(split, r))) for r in load_vl_split(split)
        }
    assert (
        not keys["test"] & keys["val"]
        and not keys["test"] & keys["train"]
        and not keys["val"] & keys["train"]
    )
    assert len(keys["test"]) == VL_SPLIT_SIZES["test"]  # distinct within the evaluation splits
    test, blank = load_vl_split("test"), load_vl_split("test-blank")
    for real, empty in zip(test, blank, strict=True):
        assert {**real, "images": empty["images"]} == empty and real["images"] != empty["images"]
        with (
            Image.open(VL_DATA_DIR / real["images"][0]) as a,
            Image.open(VL_DATA_DIR / empty["images"][0]) as b,
        ):
            assert a.size == b.size
            assert b.convert("RGB").getextrema() == ((255, 255),) * 3
    assert render_blank((56, 84)) == render_blank((56, 84))


def test_teacher_trace_reads_the_image_first_and_ends_in_the_answer():
    problem = f"{IMAGE_STATEMENT} Start at x, then +7, *2."
    trace = vl_trace(problem, 3, TeacherConfig(0.0, 0.0, 0.0), random.Random(0))
    assert trace == "x=3\n3+7=10\n10*2=20\nThe answer is \\boxed{20}"
    plain = vl_trace("Start at 12, then -2.", 5, TeacherConfig(0.0, 0.0, 0.0), random.Random(0))
    assert plain == "12-2=10\nThe answer is \\boxed{10}"
    assert last_boxed_int(trace) == solve_vl(problem, 3)


def test_training_batch_labels_only_the_response():
    from PIL import Image

    from ares_cli.toy.tiny_vl import build_processor, build_vl_tokenizer
    from ares_cli.toy.vision_build import vl_base_shape

    processor = build_processor(build_vl_tokenizer(), vl_base_shape())
    batch = [
        (f"{IMAGE_STATEMENT} Start at x, then +1.", Image.new("RGB", (56, 56), PALETTE[2]), "x=2\n2+1=3"),
        ("Start at 10, then +1.", Image.new("RGB", (84, 56), PALETTE[4]), "10+1=11"),
    ]
    inputs, labels = encode_batch(processor, batch)
    tokenizer = processor.tokenizer
    assert "mm_token_type_ids" in inputs and inputs["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 6]]
    image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert (inputs["input_ids"] == image_pad).sum(dim=1).tolist() == [4, 6]
    for row, (_, _, trace) in enumerate(batch):
        kept = labels[row][labels[row] != -100].tolist()
        assert tokenizer.decode(kept) == trace + tokenizer.eos_token


def test_shipped_vl_base_loads_with_the_real_class_and_matches_its_build_info():
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    from ares_cli.models import load_model, load_processor

    info_path = vl_base_dir() / "build_info.json"
    if not info_path.exists():
        pytest.fail(f"prebuilt visual toy base missing at {vl_base_dir()}")
    info = json.loads(info_path.read_text())
    assert info["build_config"] == vl_build_config(seed=info["seed"])
    from ares_cli.store.hashing import sha256_file
    from ares_cli.toy.build import base_dir

    # built from the text base that ships now (rebuild the VL base after rebuilding the text one)
    assert info["language_init_sha256"] == sha256_file(base_dir() / "model.safetensors")
    total = sum(f.stat().st_size for f in vl_base_dir().iterdir())
    assert total <= 10 * 1024 * 1024
    model = load_model(vl_base_dir())
    assert isinstance(model, Qwen2_5_VLForConditionalGeneration)
    assert sum(p.numel() for p in model.parameters()) == info["params"]
    assert sum(p.numel() for p in model.model.visual.parameters()) == info["vision_params"]
    processor = load_processor(vl_base_dir())
    tokenizer = processor.tokenizer
    tokens = {"image_token_id": "<|image_pad|>", "vision_start_token_id": "<|vision_start|>"}
    for name, token in (tokens | {"vision_end_token_id": "<|vision_end|>"}).items():
        assert getattr(model.config, name) == tokenizer.convert_tokens_to_ids(token)
    from PIL import Image

    record = load_vl_split("test")[0]
    text = processor.apply_chat_template(
        vl_prompt_messages(record["problem"]), add_generation_prompt=True, tokenize=False
    )
    with Image.open(io.BytesIO(_image_bytes("test", record))) as image:
        inputs = processor(text=[text], images=[image.convert("RGB")], return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    assert torch.isfinite(logits).all()


def test_toy_init_vision_builds_end_to_end_with_a_tiny_budget(tmp_path):
    from ares_cli.models import load_model, load_processor

    result = run_ares("--json", "toy", "init", "--vision", "--steps", "1", process=False, root=tmp_path)
    payload = json.loads(result.stdout)
    assert payload["origin"] == "built" and "toy-init-vl" in payload["artifact_id"]
    model_dir = Path(payload["path"]) / "model"
    info = json.loads((model_dir / "build_info.json").read_text())
    assert info["build_config"] == vl_build_config(steps=1)
    load_model(model_dir)
    assert load_processor(model_dir) is not None
    again = json.loads(
        run_ares("--json", "toy", "init", "--vision", "--steps", "1", process=False, root=tmp_path).stdout
    )
    assert again["up_to_date"] and again["artifact_id"] == payload["artifact_id"]


def test_language_model_starts_from_the_text_toy_base():
    import torch
    from transformers import AutoModelForCausalLM

    from ares_cli.errors import UsageError
    from ares_cli.toy.build import base_dir
    from ares_cli.toy.tiny_vl import build_tiny_vl, build_vl_tokenizer
    from ares_cli.toy.vision_build import VisionBuildConfig, load_text_base_into, vl_base_shape

    tokenizer = build_vl_tokenizer()
    model = build_tiny_vl(tokenizer, vl_base_shape(), seed=0)
    assert load_text_base_into(model, base_dir()) == 38
    text_base = AutoModelForCausalLM.from_pretrained(str(base_dir()))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Start at 12, then +5, *2."}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(prompt + "12+5=17\n", add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        vl_logits = model(input_ids=ids).logits[0, :, : text_base.config.vocab_size]
        text_logits = text_base(input_ids=ids).logits[0]
    # the same next tokens everywhere (the RMSNorm epsilon differs: 1e-6 against 1e-5)
    assert torch.equal(vl_logits.argmax(-1), text_logits.argmax(-1))
    assert (vl_logits - text_logits).abs().max() < 0.05
    with pytest.raises(UsageError):
        VisionBuildConfig(language_init="pretrained")


def test_the_same_seed_builds_the_same_weights(tmp_path):
    import torch
    from safetensors.torch import load_file

    from ares_cli.toy.tiny_vl import VLShape
    from ares_cli.toy.vision_build import build_vl_base

    def build(name: str, seed: int):
        build_vl_base(tmp_path / name, seed, steps=2, batch_size=4, language_init="random", shape=VLShape())
        return load_file(str(tmp_path / name / "model.safetensors"))

    first, again, other = build("a", 0), build("b", 0), build("c", 1)
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


@pytest.mark.parametrize("manifest", ["toy-vl-test", "toy-vl-test-blank"])
def test_the_manifests_load_with_their_images(manifest, tmp_path):
    summary = json.loads(run_ares("--json", "data", "check", manifest, process=False, root=tmp_path).stdout)
    assert summary["image_stats"]["images"] == summary["image_stats"]["records_with_images"] == 200
    assert summary["meta_keys"] == ["difficulty", "needs_image"]
