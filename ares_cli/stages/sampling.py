"""Generate K samples per problem and grade them, appending sample rows to a resumable RowLog.

Shared by ``ares passrate`` and ``ares eval``. Problems are processed in fixed chunks; each sample's seed
depends only on (base seed, problem id, sample index), so a resumed run regenerates exactly the text an
uninterrupted run would have produced and appends only the rows that are missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ares_cli.config import option, seed_option
from ares_cli.errors import UsageError
from ares_cli.grading.error_rate import ERROR_CHECK_MIN_SAMPLES, check_grade_errors
from ares_cli.grading.judge import check_judge_grader, parse_judge_grader
from ares_cli.models.pixels import (
    MAX_PIXELS,
    MAX_PIXELS_HELP,
    MIN_PIXELS,
    MIN_PIXELS_HELP,
    check_pixel_bounds,
)
from ares_cli.stages.judge_model import JudgeConfig

SAMPLE_KEY = ("problem_id", "sample_idx")
MAX_K = 4096  # samples per problem: pass@k studies use up to 1024; a larger K is a typo, not a plan
PASSRATE_BUDGET = 1024  # passrate's budget when neither the user nor the model sets one


@dataclass(frozen=True)
class SamplingConfig:
    """Generation and grading settings shared by passrate and eval."""

    backend: Literal["auto", "hf", "vllm", "replay"] = option(
        "auto", "Generation backend: auto (vllm if present with a GPU, else hf), hf, vllm, replay."
    )
    k: int = option(8, "Samples per problem.", ge=1, le=MAX_K)
    temperature: float = option(1.0, "Sampling temperature (0 = greedy).", ge=0.0)
    top_p: float = option(1.0, "Nucleus sampling mass.", gt=0.0, le=1.0)
    max_new_tokens: int | None = option(
        None,
        f"Generation budget per sample; unset = the model's generation_config.json max_new_tokens, else "
        f"{PASSRATE_BUDGET}.",
        ge=1,
    )
    seed: int = seed_option(0, "Base seed; each (problem, sample) derives its own seed from it.")
    system_prompt: str | None = option(None, "Optional system message.")
    prompt_template: str | None = option(None, "Python format string with {problem} for the user message.")
    stop: list[str] = option([], "Extra stop strings.")
    grader: str = option("math_verify", "Grader name (or module:function with trust_grader_code).")
    trust_grader_code: bool = option(
        False, "Allow a module:function grader: import and run that module (command line only).",
        command_line_only="--trust-grader-code",
    )  # fmt: skip
    grade_workers: int = option(2, "Grading worker processes.", ge=1, le=256)
    grade_timeout_s: float = option(10.0, "Hard per-sample grading timeout (the worker is killed).", gt=0.0)
    chunk_problems: int = option(32, "Problems generated per batch; rows are written after each chunk.", ge=1)
    batch_size: int = option(64, "Rows per forward pass (hf backend).", ge=1)
    replay_file: str | None = option(None, "Completions JSONL for the replay backend.")
    min_pixels: int = option(MIN_PIXELS, MIN_PIXELS_HELP, ge=1)
    max_pixels: int = option(MAX_PIXELS, MAX_PIXELS_HELP, ge=1)
    limit: int | None = option(None, "Only the first N problems of the dataset.", ge=1)
    max_grade_error_rate: float = option(
        0.1, "Fail the stage when more than this fraction of samples is graded 'error' (a broken grader).",
        ge=0.0, le=1.0,
    )  # fmt: skip
    skip_invalid_rows: bool = option(
        False, "Drop the dataset's invalid rows (each listed in the artifact's stats) instead of failing."
    )
    skip_long_prompts: bool = option(
        False,
        "Skip (and report) problems whose prompt + max_new_tokens exceeds the model's context, not fail.",
    )
    judge: JudgeConfig = option(
        JudgeConfig(), "Model judge of the judge graders (judge, judge:MODEL, math+judge)."
    )

    def check(self) -> None:
        """The grader must resolve (a known name, a judge grader with a judge model to ask, or with
        ``trust_grader_code`` an importable ``module:function(gold, response)``)."""
        from ares_cli.grading.registry import resolve_grader

        if self.grader and parse_judge_grader(self.grader):
            check_judge_grader(self.grader, self.judge)
        elif self.grader:
            resolve_grader(self.grader, trust_code=self.trust_grader_code)
        check_pixel_bounds(self.min_pixels, self.max_pixels)
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise UsageError(
                f"config key 'stop': every stop string must be non-empty, got {list(self.stop)!r}"
            )


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), max(1, size)):
        yield items[start : start + size]


GPU_BUDGET = 0.9  # the GPU share of the run's engines: VLLMBackend's default gpu_memory_utilization


def gpu_shares(cfg: SamplingConfig) -> tuple[float, float]:
    """(the sampled model's vLLM share, the judge's) of one budget, :data:`GPU_BUDGET` of the GPU: a model
    judge (judge graders, not the replay judge) lives beside the sampled model's engine for the whole run,
    so it takes ``judge.gpu_memory_utilization`` of that budget rather than a second engine's worth."""
    if cfg.grader and parse_judge_grader(cfg.grader) and cfg.judge.backend != "replay":
        judge = cfg.judge.gpu_memory_utilization
        return round(GPU_BUDGET - judge, 6), judge
    return GPU_BUDGET, 0.0


def open_backend(cfg: SamplingConfig, model_path: str | None, *, max_images: int = 0):
    """The configured generation backend (hf batch size, replay file, image pixel bounds; vllm is built for
    ``max_images`` images per prompt, with its share of the GPU: :func:`gpu_shares`)."""
    from ares_cli.generation import get_backend, resolve_backend_name

    name = resolve_backend_name(cfg.backend)
    pixels = {"min_pixels": cfg.min_pixels, "max_pixels": cfg.max_pixels}
    if name == "hf":
        return get_backend("hf", model_path, batch_size=cfg.batch_size, **pixels)
    if name == "replay":
        tokenizer = model_path if model_path else None
        return get_backend("replay", cfg.replay_file, tokenizer=tokenizer)
    share = {"gpu_memory_utilization": gpu_shares(cfg)[0]}
    return get_backend(
        name, model_path, **share, **({"max_images": max_images, **pixels} if max_images else {})
    )


def backend_tokenizer(backend) -> Any:
    tokenizer = getattr(backend, "tokenizer", None)
    if tokenizer is None and hasattr(backend, "llm"):
        tokenizer = backend.llm.get_tokenizer()
    return tokenizer


def context_window(model_config: Any) -> int | None:
    """Tokens a model attends to, from its HF config (a VLM's text config where the top level lacks it)."""
    for cfg in (model_config, getattr(model_config, "text_config", None)):
        for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(cfg, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def fit_context(
    problems: list[dict[str, Any]], cfg: SamplingConfig, model_path: str | None, budget=None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Problems whose rendered prompt plus ``max_new_tokens`` fits the model's context, checked before any
    generation from the model's tokenizer and config alone: ``(kept, skipped ids)``.

    A problem that does not fit is an InputError naming it (all of them together, exit 3) unless
    ``cfg.skip_long_prompts``, when it is skipped and reported; a budget that leaves no room for any prompt
    is a UsageError naming where the budget came from (``budget``, a :class:`~ares_cli.models.budget.Budget`).
    Without a model (replay) every problem is kept.
    """
    from ares_cli.errors import InputError, InputErrors, UsageError

    if model_path is None:
        return problems, []
    from transformers import AutoConfig

    from ares_cli.models import load_processor, load_tokenizer
    from ares_cli.models.vision import encode_prompt

    window = context_window(AutoConfig.from_pretrained(model_path))
    if window is None:
        return problems, []
    room = window - cfg.max_new_tokens
    if room < 1:
        from ares_cli.models.budget import SOURCE_TEXT

        origin = f"{SOURCE_TEXT[budget.source]}; " if budget is not None else ""
        raise UsageError(
            f"max_new_tokens {cfg.max_new_tokens} leaves no room for a prompt in the model's {window}-token "
            f"context ({origin}use --max-new-tokens below {window})"
        )
    tokenizer = load_tokenizer(model_path)
    processor = None
    if any(p.get("images") for p in problems):  # image tokens count: placeholders expanded per image
        processor = load_processor(model_path, min_pixels=cfg.min_pixels, max_pixels=cfg.max_pixels)
    too_long: list[tuple[dict, int]] = []
    for p in problems:
        images = tuple(p.get("images") or ()) if processor is not None else ()
        n = len(encode_prompt(tokenizer, processor, render(cfg, processor or tokenizer, p), images)[0])
        if n > room:
            too_long.append((p, n))
    if too_long and not cfg.skip_long_prompts:
        raise InputErrors([
            InputError(
                f"problem {p['id']!r}: prompt is {n} tokens; with max_new_tokens {cfg.max_new_tokens} it exceeds "
                f"the model's {window}-token context (skip_long_prompts=true skips such problems)",
                field="problem",
            )
            for p, n in too_long
        ])  # fmt: skip
    skipped = {p["id"] for p, _ in too_long}
    return [p for p in problems if p["id"] not in skipped], sorted(skipped)


def render(cfg: SamplingConfig, tokenizer: Any, problem: dict[str, Any]) -> str:
    """The prompt text of ``problem``; ``tokenizer`` may be a processor (one placeholder per image)."""
    from ares_cli.generation import render_prompt

    if tokenizer is None:  # replay without a tokenizer: the prompt text is not used
        return problem["problem"]
    return render_prompt(
        tokenizer,
        problem["problem"],
        system_prompt=cfg.system_prompt,
        template=cfg.prompt_template,
        n_images=len(problem.get("images") or ()),
    )


def sample_and_grade(
    problems: list[dict[str, Any]],
    rows,
    *,
    cfg: SamplingConfig,
    backend,
    pool,
    progress: Callable[[int, int, float], None] | None = None,
) -> dict[str, float]:
    """Fill ``rows`` (a RowLog keyed by problem_id, sample_idx) with K graded samples per problem.

    Returns timing totals (generate_s, grade_s, generated_rows). Fails (StageFailure) as soon as more than
    ``cfg.max_grade_error_rate`` of the samples graded so far (at least :data:`ERROR_CHECK_MIN_SAMPLES`,
    or all of them at the end) are graded ``error``: a grader that cannot grade must not yield pass rate 0.
    """
    from ares_cli.generation import GenerationRequest, SamplingParams, seed_for

    sampling = SamplingParams(
        temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens, stop=tuple(cfg.stop)
    )
    tokenizer = getattr(backend, "processor", None) or backend_tokenizer(backend)
    totals = {"generate_s": 0.0, "grade_s": 0.0, "generated_rows": 0}
    graded: list[str] = []
    first_error: list[str | None] = []
    done = sum(1 for p in problems if all((p["id"], i) in rows for i in range(cfg.k)))
    for chunk in chunks(problems, cfg.chunk_problems):
        todo = [p for p in chunk if any((p["id"], i) not in rows for i in range(cfg.k))]
        if not todo:
            continue
        seeds = {p["id"]: tuple(seed_for(cfg.seed, p["id"], i) for i in range(cfg.k)) for p in todo}
        requests = [
            GenerationRequest(
                prompt=render(cfg, tokenizer, p),
                seeds=seeds[p["id"]],
                key=p["id"],
                images=tuple(p.get("images") or ()),
            )
            for p in todo
        ]
        started = time.perf_counter()
        completions = backend.generate(requests, sampling)
        totals["generate_s"] += time.perf_counter() - started
        pending = [
            (p, i, c)
            for p, comps in zip(todo, completions, strict=True)
            for i, c in enumerate(comps)
            if (p["id"], i) not in rows
        ]
        started = time.perf_counter()
        grades = pool.grade([(pool.gold_for(p), c.text) for p, _, c in pending])
        totals["grade_s"] += time.perf_counter() - started
        rows.write(
            [
                {
                    "problem_id": p["id"],
                    "sample_idx": i,
                    "seed": seeds[p["id"]][i],
                    "response": c.text,
                    "n_tokens": c.n_tokens,
                    "finish_reason": c.finish_reason,
                    "extracted": g.extracted,
                    "grade": g.grade,
                    "grader": g.grader,
                }
                for (p, i, c), g in zip(pending, grades, strict=True)
            ]
        )
        totals["generated_rows"] += len(pending)
        graded += [g.grade for g in grades]
        first_error += [g.detail for g in grades if g.grade == "error"][: 1 - len(first_error)]
        if len(graded) >= ERROR_CHECK_MIN_SAMPLES:
            check_grade_errors(graded, cfg.max_grade_error_rate, pool.grader, first_error)
        done += len(todo)
        if progress is not None:
            progress(done, len(problems), totals["generate_s"] + totals["grade_s"])
    every = [rows.rows[(p["id"], i)]["grade"] for p in problems for i in range(cfg.k) if (p["id"], i) in rows]
    check_grade_errors(every, cfg.max_grade_error_rate, pool.grader, first_error)
    return totals
