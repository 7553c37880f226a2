"""Rollouts: which prompts a step draws, generating and grading their groups, and the cross-rank exchange.

Prompt order is a pure function of (seed, position): epoch e is a ``random.Random(seed + e)`` permutation
of the training problems, and the trainer's ``cursor`` (prompts drawn so far, extra dynamic-sampling rounds
included) is the only data state a checkpoint needs. Each draw has a global index; a response's sampling
seed is ``seed_for(seed, f"{problem_id}@{index}", sample)``, so it does not depend on the rank that
generates it, on the batch it shares, or on whether the run was resumed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ares_cli.training.rl.step_metrics import gold_of


class PromptSampler:
    """Deterministic epoch-wise shuffled stream of problems."""

    def __init__(self, problems: list[dict[str, Any]], seed: int):
        if not problems:
            raise ValueError("no training problems")
        self.problems, self.seed = problems, seed
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.problems)))
            random.Random(self.seed + epoch).shuffle(order)
            self._orders = {epoch: order}
        return self._orders[epoch]

    def draw(self, cursor: int, n: int) -> list[tuple[int, dict[str, Any]]]:
        """(global index, problem) for draws ``cursor .. cursor + n - 1``."""
        size = len(self.problems)
        return [(i, self.problems[self._order(i // size)[i % size]]) for i in range(cursor, cursor + n)]


@dataclass
class Group:
    """One prompt and its G graded responses (JSON-able, so ranks can exchange it)."""

    index: int
    problem_id: str
    prompt_ids: list[int]
    response_ids: list[list[int]]
    finish: list[str]
    grades: list[str]
    rewards: list[float] = field(default_factory=list)
    # entropy-triggered branching (:mod:`.branching`); empty lists = no branch in this group
    origin: list[int] = field(default_factory=list)  # -1 for the G rollouts, else the response branched from
    prefix_len: list[int] = field(default_factory=list)  # leading tokens shared with the origin
    context_len: list[int] = field(default_factory=list)  # leading response tokens collated as context
    images: list[str] = field(default_factory=list)  # the prompt's image paths (prompt_ids hold their pads)

    @property
    def correct(self) -> list[bool]:
        return [g == "correct" for g in self.grades]

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def prompt_request(
    tokenizer, problem: dict[str, Any], rollout_cfg, seeds=(), *, key: str = "", processor=None
):
    """The :class:`~ares_cli.generation.GenerationRequest` of one problem: its prompt rendered with one
    image placeholder per image (through the processor's chat template when there is one) and its images."""
    from ares_cli.generation import GenerationRequest, render_prompt

    images = tuple(problem.get("images") or ())
    prompt = render_prompt(processor or tokenizer, problem["problem"], system_prompt=rollout_cfg.system_prompt,
                           template=rollout_cfg.prompt_template, n_images=len(images))  # fmt: skip
    return GenerationRequest(prompt=prompt, seeds=tuple(seeds), key=key, images=images)


def prompt_ids(tokenizer, request, processor=None) -> list[int]:
    """Token ids of a request's prompt, image placeholders expanded to each image's token count."""
    from ares_cli.models.vision import encode_prompt

    return encode_prompt(tokenizer, processor, request.prompt, request.images)[0]


def encode_prompts(tokenizer, problems: list[dict[str, Any]], rollout_cfg, processor=None) -> list[list[int]]:
    return [prompt_ids(tokenizer, prompt_request(tokenizer, p, rollout_cfg, processor=processor), processor)
            for p in problems]  # fmt: skip


def generate_groups(
    backend, tokenizer, draws, *, cfg, seed: int, pool, entropy_fn=None, world: int = 1, processor=None
) -> list[Group]:
    """Generate ``cfg.rollout.group_size`` responses per drawn prompt and grade them; with
    ``rollout.branching.enabled``, then add entropy-triggered branches (``entropy_fn(groups)`` -> the
    responses' token entropies and mask; :func:`~.branching.branch_groups`; the step's token budget is
    split over ``world`` ranks). Image prompts need the model's ``processor``."""
    from ares_cli.generation import SamplingParams, seed_for

    r = cfg.rollout
    sampling = SamplingParams(temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens)
    requests = [
        prompt_request(tokenizer, p, r, [seed_for(seed, f"{p['id']}@{index}", i) for i in range(r.group_size)],
                       key=p["id"], processor=processor)
        for index, p in draws
    ]  # fmt: skip
    completions, grades = generate_and_grade(backend, requests, sampling, [gold_of(pool, p) for _, p in draws], pool,
                                             overlap=cfg.grading.overlap)  # fmt: skip
    groups, g = [], 0
    for (index, p), req, comps in zip(draws, requests, completions, strict=True):
        n = len(comps)
        groups.append(Group(
            index=index, problem_id=p["id"], prompt_ids=prompt_ids(tokenizer, req, processor),
            response_ids=[list(c.token_ids) for c in comps], finish=[c.finish_reason for c in comps],
            grades=[x.grade for x in grades[g:g + n]], images=list(req.images),
        ))  # fmt: skip
        g += n
    if cfg.rollout.branching.enabled and groups:
        from ares_cli.errors import UsageError
        from ares_cli.training.rl.branching import branch_groups

        if entropy_fn is None:
            raise UsageError("rollout.branching needs the policy's token entropies (pass entropy_fn)")

        branch_groups(groups, [p for _, p in draws], entropy_fn(groups), backend=backend, tokenizer=tokenizer,
                      rollout=r, seed=seed, pool=pool, world=world)  # fmt: skip
    return groups


def generate_and_grade(
    backend, requests, sampling, golds: list[str], pool, *, overlap: bool
) -> tuple[list, list]:
    """Each request's completions and their grades (flat: request, then seed order), ``golds[i]`` being
    request i's answer. With ``overlap``, a backend that reports its decode batches (``on_batch``) and a
    pool that grades in the background (``submit``), each batch is graded while the next one decodes
    (not when all rows fit one batch: nothing would decode meanwhile, benchmarks/bench_grading_overlap.py);
    the grades are the same either way, only the waiting differs."""
    if not requests:
        return [], []
    n_rows = sum(len(r.seeds) for r in requests)
    batches = getattr(backend, "reports_batches", False) and n_rows > getattr(backend, "batch_size", n_rows)
    if not (overlap and batches and getattr(pool, "grades_in_background", False)):
        completions = backend.generate(requests, sampling)
        flat = [(golds[ri], c.text) for ri, comps in enumerate(completions) for c in comps]
        return completions, pool.grade(flat) if flat else []
    jobs: list[tuple[list[tuple[int, int]], Any]] = []

    def grade_batch(rows) -> None:
        jobs.append(
            ([(ri, si) for ri, si, _ in rows], pool.submit([(golds[ri], c.text) for ri, _, c in rows]))
        )

    completions = backend.generate(requests, sampling, on_batch=grade_batch)
    by_row = {}
    for (keys, _), results in zip(jobs, pool.collect([future for _, future in jobs]), strict=True):
        by_row.update(zip(keys, results, strict=True))
    return completions, [by_row[(ri, si)] for ri, comps in enumerate(completions) for si in range(len(comps))]


def all_gather_groups(groups: list[Group]) -> list[Group]:
    """Every rank's groups on every rank, in global draw order (identity in one process).

    Sent as JSON through :func:`~ares_cli.training.distributed.all_gather_json` (never pickled)."""
    from ares_cli.training import distributed

    if not distributed.is_initialized():
        return sorted(groups, key=lambda g: g.index)
    per_rank = distributed.all_gather_json([g.to_json() for g in groups])
    by_index = {}  # the ranks of one tensor-parallel engine send the same groups: each is kept once
    for item in (item for items in per_rank for item in items):
        by_index.setdefault(item["index"], item)
    return [Group(**by_index[i]) for i in sorted(by_index)]


def validate_accuracy(
    backend, tokenizer, problems, *, cfg, pool, rank: int, world: int, processor=None
) -> dict[str, float]:
    """Accuracy, pass@k (``cfg.val.k`` samples per problem) and mean length on this rank's share of
    ``problems``, as sums and counts to all-reduce."""
    from ares_cli.generation import SamplingParams, seed_for

    v, r = cfg.val, cfg.rollout
    mine = problems[rank::world]
    sampling = SamplingParams(
        temperature=v.temperature, top_p=v.top_p, max_new_tokens=v.max_new_tokens or r.max_new_tokens
    )
    requests = [prompt_request(tokenizer, p, r, [seed_for(cfg.seed, f"val:{p['id']}", i) for i in range(v.k)],
                               key=p["id"], processor=processor) for p in mine]  # fmt: skip
    completions, grades = generate_and_grade(backend, requests, sampling, [gold_of(pool, p) for p in mine], pool,
                                             overlap=cfg.grading.overlap)  # fmt: skip
    flat = [(p, c) for p, comps in zip(mine, completions, strict=True) for c in comps]
    solved, i = 0, 0
    for comps in completions:  # pass@k: a problem counts once any of its k samples is correct
        solved += any(g.grade == "correct" for g in grades[i : i + len(comps)])
        i += len(comps)
    return {
        "correct": float(sum(g.grade == "correct" for g in grades)),
        "tokens": float(sum(c.n_tokens for _, c in flat)),
        "truncated": float(sum(c.finish_reason == "length" for _, c in flat)),
        "count": float(len(flat)),
        "solved": float(solved),
        "problems": float(len(mine)),
    }


def collect_groups(
    sampler, cursor: int, *, generate, cfg, log=lambda _m: None
) -> tuple[list[Group], int, dict]:
    """The step's ``prompts_per_step`` groups, with dynamic sampling when ``cfg.filter.mode == "filter"``.

    ``generate(draws)`` generates and grades this rank's share of ``draws`` and returns every rank's groups
    (:func:`all_gather_groups`), so all ranks take the same decisions. Each round draws a full step of
    prompts; kept groups accumulate until there are enough, at most ``1 + max_extra_rounds`` rounds, after
    which a :class:`~ares_cli.errors.StageFailure` names the counts. Returns (groups, cursor, stats).
    """
    from ares_cli.errors import StageFailure
    from ares_cli.grading.error_rate import ERROR_CHECK_MIN_SAMPLES, check_grade_errors
    from ares_cli.training.rl.rewards import filter_group, response_reward

    want, f = cfg.rollout.prompts_per_step, cfg.filter
    kept: list[Group] = []
    grades: list[str] = []
    reasons = {"all_equal": 0, "out_of_band": 0}
    rounds = 0
    while len(kept) < want:
        if rounds > f.max_extra_rounds:
            raise StageFailure(
                f"dynamic sampling: only {len(kept)} of {want} prompts kept after {rounds} rounds "
                f"({rounds * want} drawn; dropped {reasons['all_equal']} with all-equal rewards and "
                f"{reasons['out_of_band']} with mean accuracy outside [{f.low}, {f.high}]); raise "
                f"filter.max_extra_rounds, widen the band, or set filter.mode=off"
            )
        draws = sampler.draw(cursor, want)
        cursor, rounds = cursor + want, rounds + 1
        groups = generate(draws)
        grades += [x for g in groups for x in g.grades]
        if len(grades) >= ERROR_CHECK_MIN_SAMPLES:  # an error grade scores 0: a broken grader must not train
            check_grade_errors(grades, cfg.grading.max_error_rate, cfg.grading.grader, [])
        for g in groups:
            g.rewards = [response_reward(grade, len(ids), cfg.reward, cfg.rollout.max_new_tokens)
                         for grade, ids in zip(g.grades, g.response_ids, strict=True)]  # fmt: skip
            verdict = filter_group(g.rewards, g.correct, f)
            if verdict.keep:
                kept.append(g)
            else:
                reasons[verdict.reason] += 1
        if len(kept) < want and f.mode != "off":
            log(f"  dynamic sampling: {len(kept)}/{want} prompts kept after round {rounds}")
    if len(grades) < ERROR_CHECK_MIN_SAMPLES:
        check_grade_errors(grades, cfg.grading.max_error_rate, cfg.grading.grader, [])
    stats = {"grade/error_frac": grades.count("error") / max(len(grades), 1), "filter/rounds": float(rounds), "filter/dropped_all_equal": float(reasons["all_equal"]),
             "filter/dropped_out_of_band": float(reasons["out_of_band"]),
             "filter/kept_frac": len(kept) / float(rounds * want)}  # fmt: skip
    return kept[:want], cursor, stats
