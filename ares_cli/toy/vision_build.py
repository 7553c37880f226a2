"""Reproducible build of the visual toy base: a tiny Qwen2.5-VL trained on teacher traces of visual problems.

Each training example is a fresh problem of the visual task (never one of the shipped splits), its image
rendered in memory, and a teacher trace; a problem that needs the image starts its trace with ``x=<code>``,
so reading the image is a supervised step of the solution. Loss on the response tokens only.

The vision tower and merger start from random weights. The language model does too with
``language_init="random"``; by default (``"toy-base"``) it starts from the shipped text toy base, the way a
real VLM starts from a text LLM: the arithmetic is already learned, so a CPU build of minutes only has to
teach the model to read the image (from scratch, the arithmetic alone needs thousands of steps).
"""

from __future__ import annotations

import io
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ares_cli.errors import StageFailure, UsageError
from ares_cli.store.hashing import sha256_file
from ares_cli.toy.build import base_dir, fit
from ares_cli.toy.model import TOY_MAX_NEW_TOKENS
from ares_cli.toy.teacher import TeacherConfig, write_trace
from ares_cli.toy.tiny_vl import VLShape
from ares_cli.toy.vision_tasks import (
    IMAGE_SIZES,
    MAX_VL_DIFFICULTY,
    NEEDS_IMAGE_EVERY,
    held_out_keys,
    random_vl_problem,
    render_colour,
    substitute_x,
)

VL_TOY_WORLD_VERSION = 1
VL_BASE_DIR = Path(__file__).parent / "vl_base"
LANGUAGE_INITS = ("toy-base", "random")


def vl_base_shape() -> VLShape:
    """The visual base's shape: the text toy's language model (hidden 128, 4 layers, 4 heads), a 2-block
    vision tower of width 64, and Qwen2.5-VL's default pixel bounds (the toy images keep their size)."""
    return VLShape(
        hidden_size=128,
        num_layers=4,
        num_heads=4,
        intermediate_size=384,
        max_positions=640,
        vision_depth=2,
        vision_hidden_size=64,
        vision_heads=2,
        vision_intermediate_size=128,
        min_pixels=56 * 56,
        max_pixels=28 * 28 * 1280,
    )


@dataclass(frozen=True)
class VisionBuildConfig:
    """Everything that determines the visual base checkpoint (hashed by the CLI's content key)."""

    seed: int = 0
    steps: int = 500
    batch_size: int = 16
    learning_rate: float = 1e-3
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    max_difficulty: int = MAX_VL_DIFFICULTY
    verify_probs: tuple[float, ...] = (0.0, 0.5, 1.0)
    slip_base: float = 0.0
    slip_per_step: float = 0.01
    language_init: str = "toy-base"  # "toy-base" (the shipped text toy base's weights) or "random"
    shape: VLShape = field(default_factory=vl_base_shape)

    def __post_init__(self):
        if self.language_init not in LANGUAGE_INITS:
            raise UsageError(f"language_init must be one of {LANGUAGE_INITS}, got {self.language_init!r}")

    def as_dict(self) -> dict:
        data = asdict(self)
        data["verify_probs"] = list(self.verify_probs)
        data["shape"] = self.shape.as_dict()
        return {"vl_toy_world_version": VL_TOY_WORLD_VERSION, **data}


def vl_build_config(**overrides) -> dict:
    """The settings of a visual base build (defaults plus ``overrides``) as a JSON-able dict."""
    return VisionBuildConfig(**overrides).as_dict()


def vl_base_dir() -> Path:
    """Directory of the prebuilt visual base shipped with the package."""
    return VL_BASE_DIR


def vl_prompt_messages(problem: str, num_images: int = 1) -> list[dict]:
    """Chat messages that pose a visual toy problem: the image placeholders, then the problem text."""
    content = [{"type": "image"}] * num_images + [{"type": "text", "text": problem}]
    return [{"role": "user", "content": content}]


def vl_trace(problem: str, code: int, teacher: TeacherConfig, rng: random.Random) -> str:
    """The teacher's trace: ``x=<code>`` first when the problem reads the image, then the chain's steps."""
    chain = substitute_x(problem, code)
    trace = write_trace(chain, teacher, rng)
    return f"x={code}\n{trace}" if chain != problem else trace


def _training_example(rng: random.Random, config: VisionBuildConfig, held_out: set):
    """One (problem, image, trace) triple from a stream that avoids the shipped splits."""
    from PIL import Image

    needs_image = rng.randrange(NEEDS_IMAGE_EVERY) != 0
    while True:
        code, problem = random_vl_problem(rng, rng.randint(1, config.max_difficulty), needs_image)
        if (problem, code) not in held_out:
            break
    image = Image.open(io.BytesIO(render_colour(code, rng.choice(IMAGE_SIZES), rng))).convert("RGB")
    teacher = TeacherConfig(config.slip_base, config.slip_per_step, rng.choice(config.verify_probs))
    return problem, image, vl_trace(problem, code, teacher, rng)


def _batches(rng: random.Random, config: VisionBuildConfig, held_out: set, pool: int = 8):
    """Endless length-bucketed batches of examples (by trace length), in shuffled order."""
    while True:
        examples = [_training_example(rng, config, held_out) for _ in range(pool * config.batch_size)]
        examples.sort(key=lambda example: len(example[0]) + len(example[2]))
        chunks = [examples[i : i + config.batch_size] for i in range(0, len(examples), config.batch_size)]
        rng.shuffle(chunks)
        yield from chunks


def encode_batch(processor, batch):
    """Processor inputs for (problem, image, trace) triples, right-padded, with response-only labels."""
    import torch

    tokenizer = processor.tokenizer
    texts = [
        processor.apply_chat_template(vl_prompt_messages(problem), add_generation_prompt=True, tokenize=False)
        + trace
        + tokenizer.eos_token
        for problem, _, trace in batch
    ]
    tokenizer.padding_side = "right"
    inputs = processor(text=texts, images=[image for _, image, _ in batch], return_tensors="pt", padding=True)
    ids = inputs["input_ids"]
    assistant = tokenizer.convert_tokens_to_ids("<|assistant|>")
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    prompt_end = (ids == assistant).long().argmax(dim=1, keepdim=True)
    labels = ids.masked_fill((positions <= prompt_end) | (inputs["attention_mask"] == 0), -100)
    return inputs, labels


def load_text_base_into(model, text_base: Path) -> int:
    """Copy a text toy base (``LlamaForCausalLM``) into the VL model's language model; returns the count.

    Names map one to one (Qwen2.5-VL's q/k/v biases stay zero); the embedding rows of the text vocabulary are
    copied, the appended vision tokens keep their random rows. For text tokens all three multimodal RoPE
    positions are equal, so the rotary embedding is the text base's.
    """
    import torch
    from safetensors.torch import load_file

    source = load_file(str(text_base / "model.safetensors"))
    target = model.model.language_model.state_dict()
    copied = 0
    with torch.no_grad():
        for name, tensor in source.items():
            key = name.removeprefix("model.")
            if key not in target:
                continue
            if key == "embed_tokens.weight":
                target[key][: tensor.shape[0]].copy_(tensor)
            else:
                target[key].copy_(tensor)
            copied += 1
        for key, tensor in target.items():
            if key.endswith("_proj.bias"):
                tensor.zero_()
    if copied != len(source):
        raise StageFailure(f"text toy base at {text_base}: {len(source) - copied} tensors did not map")
    return copied


def train_vl_base(config: VisionBuildConfig, *, on_step: Callable[[int, float], None] | None = None):
    """Train the visual base in memory; returns ``(model, processor, final_loss)``."""
    import torch

    from ares_cli.toy.tiny_vl import build_processor, build_tiny_vl, build_vl_tokenizer

    torch.use_deterministic_algorithms(True)
    tokenizer = build_vl_tokenizer()
    processor = build_processor(tokenizer, config.shape)
    model = build_tiny_vl(tokenizer, config.shape, config.seed)
    if config.language_init == "toy-base":
        load_text_base_into(model, base_dir())
    batches = _batches(random.Random(config.seed), config, held_out_keys())

    def next_inputs() -> dict:
        inputs, labels = encode_batch(processor, next(batches))
        return {**inputs, "labels": labels}

    loss_value = fit(model, config, next_inputs, name="visual toy base", on_step=on_step)
    return model, processor, loss_value


def build_vl_base(
    out_dir: str | Path,
    seed: int = 0,
    *,
    steps: int | None = None,
    num_threads: int | None = None,
    on_step: Callable[[int, float], None] | None = None,
    **overrides,
) -> dict:
    """Train the visual base into ``out_dir`` (model, processor, tokenizer, ``build_info.json``).

    ``steps`` and ``overrides`` change :class:`VisionBuildConfig` fields; ``num_threads`` pins torch's CPU
    threads (bitwise reproducibility holds for a fixed machine and thread count). Returns the info, which
    records the sha256 of the text base the language model started from.
    """
    import torch

    if num_threads is not None:
        torch.set_num_threads(num_threads)
    if steps is not None:
        overrides["steps"] = steps
    config = VisionBuildConfig(seed=seed, **overrides)
    began = time.perf_counter()
    model, processor, final_loss = train_vl_base(config, on_step=on_step)
    seconds = time.perf_counter() - began
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.generation_config.max_new_tokens = TOY_MAX_NEW_TOKENS  # fits the context beside any toy prompt
    model.save_pretrained(str(out_dir), safe_serialization=True)
    processor.save_pretrained(str(out_dir))
    info = {
        "seed": seed,
        "build_config": config.as_dict(),
        "params": sum(p.numel() for p in model.parameters()),
        "vision_params": sum(p.numel() for p in model.model.visual.parameters()),
        "final_loss": round(final_loss, 4),
        "train_seconds": round(seconds, 1),
        "torch_threads": torch.get_num_threads(),
    }
    if config.language_init == "toy-base":  # the text base the language model started from
        info["language_init_sha256"] = sha256_file(base_dir() / "model.safetensors")
    (out_dir / "build_info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return info
