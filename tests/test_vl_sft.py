"""SFT with images on a tiny Qwen2.5-VL: labels, frozen tower bitwise unchanged, merger option, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from ares_cli.main import app  # noqa: E402
from ares_cli.training.sft_data import IGNORE, load_examples  # noqa: E402

FAST = ["--set", "lr=1e-2", "--set", "micro_batch_size=2", "--set", "max_seq_len=128", "--batch-size", "4",
        "--set", "min_pixels=784", "--set", "max_pixels=3136", "--set", "warmup_ratio=0"]  # fmt: skip


def write_vl_sft(path: Path, images, n: int = 4) -> Path:
    rows = []
    for i in range(n):
        imgs = [str(images[i % len(images)])] + ([str(images[(i + 2) % len(images)])] if i % 2 else [])
        rows.append({"prompt": f"what color {i}?", "response": f"it is {i} \\boxed{{{i}}}", "images": imgs})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _state(model_dir):
    from ares_cli.models import load_model

    return {k: v.clone() for k, v in load_model(model_dir).state_dict().items()}


def _sft(root, *args):
    return CliRunner().invoke(app, ["--artifacts-root", str(root), "--json", "sft", *args, *FAST])


def test_image_placeholders_expand_and_are_never_labelled(tiny_vl_dir, vl_images, tmp_path):
    from ares_cli.models import load_processor

    proc = load_processor(tiny_vl_dir, min_pixels=784, max_pixels=3136)
    data = write_vl_sft(tmp_path / "sft.jsonl", vl_images)
    examples, _ = load_examples(data, proc.tokenizer, 256, processor=proc)
    image_id = proc.image_token_id
    from ares_cli.models.vision import encode_images, image_token_counts

    for ex in examples:
        expected = sum(image_token_counts(proc, encode_images(proc, ex.images)))
        assert ex.input_ids.count(image_id) == expected >= len(ex.images)
        assert all(
            label == IGNORE for tok, label in zip(ex.input_ids, ex.labels, strict=True) if tok == image_id
        )
        assert any(label != IGNORE for label in ex.labels)
    assert any(ex.input_ids.count(image_id) > len(ex.images) for ex in examples)


@pytest.mark.parametrize("train_merger", [False, True])
def test_sft_freezes_the_vision_tower_bitwise_and_trains_the_lm(
    tiny_vl_dir, vl_images, tmp_path, train_merger
):
    data = write_vl_sft(tmp_path / "sft.jsonl", vl_images)
    before = _state(tiny_vl_dir)
    result = _sft(tmp_path / "art", "--model", str(tiny_vl_dir), "--data", str(data), "--max-steps", "2",
                  "--set", f"train_merger={str(train_merger).lower()}")  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    after = _state(Path(out["path"]) / "model")
    assert before.keys() == after.keys()
    tower = [k for k in before if k.startswith("model.visual.") and ".merger." not in k]
    merger = [k for k in before if ".merger." in k]
    lm = [k for k in before if k.startswith("model.language_model.") or k == "lm_head.weight"]
    assert tower and merger and lm
    assert all(torch.equal(before[k], after[k]) for k in tower)
    assert all(torch.equal(before[k], after[k]) for k in merger) != train_merger
    assert sum(not torch.equal(before[k], after[k]) for k in lm) >= len(lm) // 2
    from ares_cli.models import load_processor

    assert load_processor(Path(out["path"]) / "model") is not None  # rl and eval can encode images


def test_image_bytes_are_an_sft_input(tiny_vl_dir, vl_images, tmp_path):
    import shutil

    from PIL import Image

    copies = []
    for p in vl_images:
        copies.append(tmp_path / "img" / p.name)
        copies[-1].parent.mkdir(exist_ok=True)
        shutil.copy(p, copies[-1])
    data = write_vl_sft(tmp_path / "sft.jsonl", copies, n=2)
    args = ("--model", str(tiny_vl_dir), "--data", str(data), "--max-steps", "1")
    first = json.loads(_sft(tmp_path / "art", *args).stdout)
    assert json.loads(_sft(tmp_path / "art", *args).stdout)["up_to_date"] is True
    img = Image.open(copies[0]).convert("RGB")
    img.putpixel((1, 1), (9, 9, 9))
    img.save(copies[0])
    again = json.loads(_sft(tmp_path / "art", *args).stdout)
    assert again["artifact_id"] != first["artifact_id"]


def test_text_model_with_image_rows_exits_3(tiny_model_dir, vl_images, tmp_path):
    data = write_vl_sft(tmp_path / "sft.jsonl", vl_images, n=2)
    result = _sft(tmp_path / "art", "--model", str(tiny_model_dir), "--data", str(data), "--max-steps", "1")
    assert result.exit_code == 3
    text = result.output + result.stderr
    assert "text-only" in text and "row 1" in text and "images" in text
    assert not list((tmp_path / "art").glob("sft/*"))
