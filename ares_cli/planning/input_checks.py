"""The checks ``ares plan`` adds to a stage's own, shared by every stage's plan: the model's shapes, its
tokenizer's special tokens and a vision-language model's processor, every image decoded, the grader on the
data's own gold answers, prompt lengths per source, and the backend a GPU machine would pick.

Each records its outcome in the stage's :class:`~ares_cli.stages.checklist.Checklist`, naming the file, row
and field of every problem it finds.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ares_cli.errors import InputError
from ares_cli.planning.shapes import read_model_shape
from ares_cli.stages.checklist import Checklist

MAX_LISTED = 50


def model_checks(checks: Checklist, model_path: str | None, tokenizer=None):
    """The model's shapes from config.json and safetensors headers, its tokenizer's special tokens, and a
    vision-language model's processor."""
    if model_path is None:
        return None
    shape = checks.run("model shapes", lambda: read_model_shape(model_path), describe_shape)
    if shape is not None:
        check_tokenizer(checks, model_path, shape.vocab, tokenizer)
        if shape.vision_params:
            from ares_cli.models import load_processor

            checks.run("processor", lambda: load_processor(model_path), lambda p: type(p).__name__)
    return shape


def describe_shape(s) -> str:
    return (f"{s.architecture}: {s.params / 1e9:.3f}B parameters ({s.checkpoint_dtype} checkpoint, "
            f"{s.checkpoint_bytes / 2**30:.2f} GiB), vocab {s.vocab}, {s.layers} layers x {s.hidden}, "
            f"context {s.context}")  # fmt: skip


def planned_backend(name: str) -> tuple[str, str]:
    """The backend ``auto`` picks on a GPU machine: vllm when installed (checked here), else hf."""
    import importlib.util

    if name in ("hf", "vllm"):
        return name, f"{name} (configured)"
    if importlib.util.find_spec("vllm") is not None:
        return "vllm", "auto -> vllm (installed here; a GPU machine picks it when CUDA is present)"
    return "hf", "auto -> hf: vllm is not installed here (install ares-cli[vllm] on the GPU machine for vllm)"


def check_tokenizer(checks: Checklist, model_path: str, vocab: int, tokenizer=None) -> None:
    """End-of-sequence id (generation stops on it), a padding id (pad or eos), ids inside the vocabulary."""
    from ares_cli.models import load_tokenizer

    if tokenizer is None:
        tokenizer = checks.run("tokenizer", lambda: load_tokenizer(model_path))
    if tokenizer is None:
        return
    problems = []
    if tokenizer.eos_token_id is None:
        problems.append(f"{model_path}: tokenizer has no eos_token: generation would never stop")
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
        problems.append(f"{model_path}: tokenizer has neither pad_token nor eos_token to pad batches with")
    if len(tokenizer) > vocab:
        problems.append(
            f"{model_path}: tokenizer has {len(tokenizer)} tokens, the model's vocab_size is {vocab}"
        )
    if problems:
        checks.fail_input("special tokens", "tokenizer does not fit the model", problems)
        return
    pad = "pad" if tokenizer.pad_token_id is not None else "eos (no pad token)"
    template = "chat template" if getattr(tokenizer, "chat_template", None) else "no chat template"
    checks.ok("special tokens", f"eos id {tokenizer.eos_token_id}, padding with {pad}, {template}")


def source_table(records: list[dict], lengths: list[int], *, drop_over: int | None,
                 context_over: int | None) -> list[dict[str, Any]]:  # fmt: skip
    """Per source: problems, prompt tokens (min / mean / max), how many exceed ``drop_over`` (skipped by
    the stage) and how many exceed ``context_over`` (prompt + budget past the model's context)."""
    by: dict[str, list[int]] = defaultdict(list)
    for record, n in zip(records, lengths, strict=True):
        by[str(record.get("source", "default"))].append(n)
    rows = []
    for source, ns in sorted(by.items()):
        rows.append({
            "source": source, "problems": len(ns), "prompt min": min(ns), "mean": round(sum(ns) / len(ns), 1),
            "max": max(ns), "> max_prompt_tokens": sum(n > drop_over for n in ns) if drop_over else 0,
            "past context": sum(n > context_over for n in ns) if context_over is not None else 0,
        })  # fmt: skip
    return rows


def sampling_prompt_lengths(records: list[dict], model_path: str, cfg) -> list[int]:
    """Prompt tokens of passrate / eval problems, rendered and encoded as ``fit_context`` does."""
    from ares_cli.models import load_processor, load_tokenizer
    from ares_cli.models.vision import encode_prompt
    from ares_cli.stages.sampling import render

    tokenizer = load_tokenizer(model_path)
    processor = None
    if any(p.get("images") for p in records):
        processor = load_processor(model_path, min_pixels=cfg.min_pixels, max_pixels=cfg.max_pixels)
    out = []
    for p in records:
        images = tuple(p.get("images") or ()) if processor is not None else ()
        out.append(
            len(encode_prompt(tokenizer, processor, render(cfg, processor or tokenizer, p), images)[0])
        )
    return out


def check_images(checks: Checklist, name: str, records: list[dict], locations: list) -> None:
    """Every image of every record opens and decodes (problems named by file, row and field)."""
    from ares_cli.data.images import inspect_images

    if not any(r.get("images") for r in records):
        return
    summary, errors = inspect_images(records, locations)
    if errors:
        checks.fail_input(
            name, f"{len(errors)} image(s) do not decode", [str(e) for e in errors[:MAX_LISTED]]
        )
    else:
        checks.ok(name, f"{summary['images']} image(s) decode")


def gold_pool(checks: Checklist, grader: str, *, workers: int = 2, timeout_s: float = 10.0):
    """A started :class:`~ares_cli.grading.GradingPool` (its workers load the grader while other checks
    run), or None when the grader does not resolve (recorded)."""
    from ares_cli.grading import GradingPool

    pool = checks.run(
        "grader", lambda: GradingPool(grader, workers=workers, timeout_s=timeout_s), lambda p: p.grader
    )
    if pool is not None:
        pool.start()
    return pool


def check_gold_self_grades(checks: Checklist, name: str, loaded, pool, gold_of=None) -> None:
    """Each gold answer, boxed, graded against itself must be correct: a gold the grader cannot parse
    would mark every response wrong (or ``error``). Lists the failing rows. ``gold_of(problem)`` is the
    gold string the stage grades against (default: the pool's, with a choice grader's options)."""
    from ares_cli.grading import CORRECT

    records = loaded.records
    gold_of = gold_of or pool.gold_for
    try:
        golds = [gold_of(p) for p in records]
    except InputError as err:
        checks.fail(name, err)
        return
    grades = pool.grade([(gold, f"\\boxed{{{p['answer']}}}") for gold, p in zip(golds, records, strict=True)])
    bad = []
    for i, (p, g) in enumerate(zip(records, grades, strict=True)):
        if g.grade != CORRECT:
            file, row = loaded.locations[i] if i < len(loaded.locations) else (None, None)
            detail = f" ({g.detail})" if g.detail else ""
            bad.append(str(InputError(f"problem {p['id']!r}: gold {p['answer']!r} graded {g.grade} against itself"
                                      f" by {pool.grader}{detail}", file=file, row=row, field="answer")))  # fmt: skip
    if bad:
        checks.fail_input(
            name, f"{len(bad)} of {len(records)} gold answers fail the grader", bad[:MAX_LISTED]
        )
    else:
        checks.ok(name, f"{len(records)} gold answers graded correct against themselves by {pool.grader}")
