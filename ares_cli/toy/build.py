"""Reproducible build of the toy base checkpoint: SFT of a tiny Llama on teacher traces of mixed verbosity."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ares_cli.errors import StageFailure
from ares_cli.toy.model import ToyModelShape
from ares_cli.toy.tasks import format_problem, generate_all_splits, random_steps
from ares_cli.toy.teacher import TeacherConfig, write_trace

TOY_WORLD_VERSION = 1
# The base is trained on traces of up to 8 steps; levels 9 and 10 of the task are left for RL to learn.
BASE_MAX_DIFFICULTY = 8
BASE_DIR = Path(__file__).parent / "base"


@dataclass(frozen=True)
class BuildConfig:
    """Everything that determines the base checkpoint (hashed by the CLI's content key)."""

    seed: int = 0
    steps: int = 2400
    batch_size: int = 16
    learning_rate: float = 3e-3
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    max_difficulty: int = BASE_MAX_DIFFICULTY
    verify_probs: tuple[float, ...] = (0.0, 0.0, 0.3, 0.7, 1.0)
    slip_base: float = 0.03
    slip_per_step: float = 0.02
    shape: ToyModelShape = field(default_factory=ToyModelShape)

    def as_dict(self) -> dict:
        data = asdict(self)
        data["verify_probs"] = list(self.verify_probs)
        return {"toy_world_version": TOY_WORLD_VERSION, **data}


def build_config(**overrides) -> dict:
    """The settings of a base build (defaults plus ``overrides``) as a JSON-able dict."""
    return BuildConfig(**overrides).as_dict()


def base_dir() -> Path:
    """Directory of the prebuilt base checkpoint shipped with the package."""
    return BASE_DIR


def prompt_messages(problem: str) -> list[dict]:
    """Chat messages that pose a toy problem (the assistant turn is the trace)."""
    return [{"role": "user", "content": problem}]


def _training_example(rng: random.Random, config: BuildConfig, held_out: set[str]) -> tuple[str, str]:
    """One (problem, trace) pair from a problem stream that avoids the shipped splits."""
    while True:
        start, steps = random_steps(rng, rng.randint(1, config.max_difficulty))
        problem = format_problem(start, steps)
        if problem not in held_out:
            break
    teacher = TeacherConfig(config.slip_base, config.slip_per_step, rng.choice(config.verify_probs))
    return problem, write_trace(problem, teacher, rng)


def _encode(tokenizer, problem: str, trace: str) -> tuple[list[int], list[int]]:
    """Token ids of the chat-templated prompt plus response, and labels masking the prompt."""
    prompt = tokenizer.apply_chat_template(
        prompt_messages(problem), add_generation_prompt=True, tokenize=False
    )
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    response_ids = tokenizer(trace, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return prompt_ids + response_ids, [-100] * len(prompt_ids) + response_ids


def _batches(rng: random.Random, tokenizer, config: BuildConfig, held_out: set[str], pool: int = 8):
    """Endless length-bucketed batches: draw ``pool`` batches' worth, sort by length, shuffle the batches."""
    while True:
        examples = [
            _encode(tokenizer, *_training_example(rng, config, held_out))
            for _ in range(pool * config.batch_size)
        ]
        examples.sort(key=lambda pair: len(pair[0]))
        chunks = [examples[i : i + config.batch_size] for i in range(0, len(examples), config.batch_size)]
        rng.shuffle(chunks)
        yield from chunks


def _collate(batch: list[tuple[list[int], list[int]]], pad_id: int):
    import torch

    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, labs) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(labs)] = torch.tensor(labs)
        attention[row, : len(ids)] = 1
    return input_ids, attention, labels


def _lr_factor(step: int, config: BuildConfig) -> float:
    import math

    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine


def fit(
    model,
    config,
    next_inputs: Callable[[], dict],
    *,
    name: str,
    on_step: Callable[[int, float], None] | None = None,
) -> float:
    """The toy builds' loop: AdamW (betas 0.9/0.98) with warmup + cosine (:func:`_lr_factor`), clipped at 1.

    ``next_inputs()`` returns one batch's model keyword arguments, labels included; ``config`` carries
    ``steps``, ``learning_rate``, ``weight_decay``, ``warmup_steps`` and ``min_lr_ratio``. Leaves the model in
    eval mode and returns the last loss.
    """
    import torch

    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, betas=(0.9, 0.98), weight_decay=config.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, config))
    loss_value = float("nan")
    for step in range(config.steps):
        loss = model(**next_inputs()).loss
        if not torch.isfinite(loss):
            raise StageFailure(f"{name} build diverged at step {step} (loss {loss.item()})")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        loss_value = loss.item()
        if on_step is not None:
            on_step(step, loss_value)
    model.eval()
    return loss_value


def train_base(config: BuildConfig, *, on_step: Callable[[int, float], None] | None = None):
    """Train the base model in memory; returns ``(model, tokenizer, final_loss)``."""
    import torch

    from ares_cli.toy.model import build_model
    from ares_cli.toy.tokenizer import build_tokenizer

    torch.use_deterministic_algorithms(True)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, config.shape, config.seed)
    held_out = {r["problem"] for records in generate_all_splits().values() for r in records}
    batches = _batches(random.Random(config.seed), tokenizer, config, held_out)

    def next_inputs() -> dict:
        input_ids, attention, labels = _collate(next(batches), tokenizer.pad_token_id)
        return {"input_ids": input_ids, "attention_mask": attention, "labels": labels}

    loss_value = fit(model, config, next_inputs, name="toy base", on_step=on_step)
    return model, tokenizer, loss_value


def build_base(
    out_dir: str | Path,
    seed: int = 0,
    *,
    steps: int | None = None,
    num_threads: int | None = None,
    on_step: Callable[[int, float], None] | None = None,
    **overrides,
) -> dict:
    """Train the base checkpoint into ``out_dir`` (model, tokenizer, ``build_info.json``); returns the info.

    ``steps`` and ``overrides`` change :class:`BuildConfig` fields; ``num_threads`` pins torch's CPU
    threads (bitwise reproducibility holds for a fixed machine and thread count).
    """
    import torch

    from ares_cli.toy.model import count_parameters

    if num_threads is not None:
        torch.set_num_threads(num_threads)
    if steps is not None:
        overrides["steps"] = steps
    config = BuildConfig(seed=seed, **overrides)
    began = time.perf_counter()
    model, tokenizer, final_loss = train_base(config, on_step=on_step)
    seconds = time.perf_counter() - began
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))
    info = {
        "seed": seed,
        "build_config": config.as_dict(),
        "params": count_parameters(model),
        "final_loss": round(final_loss, 4),
        "train_seconds": round(seconds, 1),
        "torch_threads": torch.get_num_threads(),
    }
    (out_dir / "build_info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return info
