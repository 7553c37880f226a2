"""Entropy-triggered branching (ARES sec. 3.2.1): "whenever the windowed entropy of a segment exceeds τ, the
model branches additional trajectories from step t; otherwise, the rollout proceeds linearly".

After the G rollouts of a prompt are generated and graded:

1. the policy's full-vocabulary token entropies of the responses (one no-grad pass, the trainer's
   ``entropy_fn``) -> window entropy H̄_{t:w} (eq. 4; only complete windows, AEPO's ``end_rule="full"``);
2. τ = ``threshold`` or, by default, the batch threshold of sec. 3.2.1 over this rank's rollouts (mean of the
   per-response 95th percentiles of H_t);
3. per prompt, up to B = ``max_points`` branch points (i, t) with H̄_{i,t:w} ≥ τ and t ≥ 1, highest H̄ first,
   two points of one response at least w tokens apart;
4. a token budget per step (``token_budget``, split evenly over ranks): points are kept in order of H̄ while
   the estimated cost Σ samples·(L_i − t) (the original continuation's length) fits;
5. each point's prefix o_i[:t] is continued with ``samples`` fresh samples (own seeds; the hf backend prefills
   the prompt + prefix once per point and copies its KV cache, vLLM reuses it through prefix caching), up to
   the response budget counted from the start of the response, graded, and added to the prompt's group.

Advantages: branches join their prompt's group, so GRPO's mean and std run over the G rollouts and the
branches together (one shared group baseline). Loss: with ``prefix_tokens="context"`` (default) a branch's
shared prefix is context only and only its continuation is trained (the prefix tokens are trained once, in the
response that sampled them); ``"response"`` trains a branch as a full response, so shared prefix tokens get
gradient once per row that holds them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ares_cli.config import option
from ares_cli.errors import UsageError

PREFIX_MODES = ("context", "response")


@dataclass
class BranchingConfig:
    """Entropy-triggered branching of rollouts (ARES sec. 3.2.1); off by default."""

    enabled: bool = option(
        False, "Branch extra trajectories at high-window-entropy points (ARES sec. 3.2.1)."
    )
    max_points: int = option(2, "B: branch points per prompt at most.", ge=1)
    samples: int = option(1, "Fresh continuations per branch point.", ge=1)
    token_budget: int = option(0, "Estimated branch tokens per step, all ranks (0 = no limit).", ge=0)
    window: int = option(4, "w of the window entropy (eq. 4); also the minimum gap between two points.", ge=1)
    quantile: float = option(
        0.95, "Per-response entropy quantile of the batch threshold τ (sec. 3.2.1).", ge=0.0, le=1.0
    )
    threshold: float | None = option(
        None, "Fixed τ in nats; None = the batch threshold of these rollouts.", ge=0.0
    )
    prefix_tokens: str = option(
        "context", '"context": train only the continuation; "response": the whole row.'
    )

    def __post_init__(self) -> None:
        if self.prefix_tokens not in PREFIX_MODES:
            raise UsageError(
                f"unknown rollout.branching.prefix_tokens {self.prefix_tokens!r}; valid: context, response"
            )
        if min(self.max_points, self.samples, self.window) < 1 or self.token_budget < 0:
            raise UsageError(
                "rollout.branching: max_points, samples, window must be >= 1 and token_budget >= 0"
            )
        if not 0.0 <= self.quantile <= 1.0:
            raise UsageError(f"rollout.branching.quantile must lie in [0, 1], got {self.quantile}")


def pick_points(win, eligible, tau: float, max_points: int, min_gap: int) -> list[tuple[int, int, float]]:
    """Branch points (response i, position t, H̄) of one group: H̄ ≥ τ where ``eligible``, highest first
    (ties: lower i, then lower t), at most ``max_points``, two points of a response ≥ ``min_gap`` apart."""
    import torch

    hits = torch.nonzero(eligible & (win >= tau)).tolist()
    cand = sorted(((float(win[i, t]), i, t) for i, t in hits), key=lambda c: (-c[0], c[1], c[2]))
    chosen: list[tuple[int, int, float]] = []
    for h, i, t in cand:
        if len(chosen) == max_points:
            break
        if all(ci != i or abs(ct - t) >= min_gap for ci, ct, _ in chosen):
            chosen.append((i, t, h))
    return chosen


def within_budget(
    points: list[tuple[int, int, int, float, int]], budget: int
) -> list[tuple[int, int, int, float, int]]:
    """Points (group, i, t, H̄, cost) kept in order of H̄ while the summed cost fits ``budget`` (0 = all)."""
    if budget <= 0:
        return points
    kept, spent = [], 0
    for p in sorted(points, key=lambda p: (-p[3], p[0], p[1], p[2])):
        if spent + p[4] <= budget:
            kept.append(p)
            spent += p[4]
    return sorted(kept, key=lambda p: (p[0], p[1], p[2]))


def branch_groups(
    groups, problems, entropies, *, backend, tokenizer, rollout, seed: int, pool, world: int = 1
) -> None:
    """Add entropy-triggered branches to ``groups`` in place (``problems`` aligned with them, ``entropies``
    the [rows, T] token entropies of their responses in group order with ``mask``: a (tensor, tensor));
    ``rollout`` is the config's section (its ``branching`` settings and sampling)."""
    from ares_cli.algorithms.aepo import batch_threshold, full_window_starts, window_entropy
    from ares_cli.generation import SamplingParams, seed_for
    from ares_cli.training.rl.step_metrics import gold_of

    b, budget = rollout.branching, rollout.max_new_tokens
    ent, mask = entropies
    if ent.numel() == 0:
        return
    tau = b.threshold if b.threshold is not None else float(batch_threshold(ent, mask, b.quantile))
    win = window_entropy(ent, mask, b.window)
    eligible = full_window_starts(mask, b.window)
    eligible[:, 0] = False  # t = 0 would resample the whole response: not a branch
    points, row = [], 0
    for k, g in enumerate(groups):
        n = len(g.response_ids)
        for i, t, h in pick_points(win[row : row + n], eligible[row : row + n], tau, b.max_points, b.window):
            points.append((k, i, t, h, b.samples * (len(g.response_ids[i]) - t)))
        row += n
    points = within_budget(points, b.token_budget // max(world, 1))
    if not points:
        return
    prompts, seeds, where = [], [], []
    for k, i, t, _h, _cost in points:
        g = groups[k]
        for j in range(b.samples):
            prompts.append(list(g.prompt_ids) + list(g.response_ids[i][:t]))
            seeds.append(seed_for(seed, f"{g.problem_id}@{g.index}:branch:{i}:{t}", j))
            where.append((k, i, t))
    longest = max(budget - t for _k, _i, t in where)
    sampling = SamplingParams(temperature=rollout.temperature, top_p=rollout.top_p, max_new_tokens=longest)
    comps = backend.generate_from_ids(prompts, seeds, sampling)
    full, finish = [], []
    for (k, i, t), c in zip(where, comps, strict=True):
        cont, reason = list(c.token_ids), c.finish_reason
        if len(cont) > budget - t:  # the response budget counts from the start of the response
            cont, reason = cont[: budget - t], "length"
        full.append(list(groups[k].response_ids[i][:t]) + cont)
        finish.append(reason)
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in full]
    grades = pool.grade(
        [(gold_of(pool, problems[k]), text) for (k, _i, _t), text in zip(where, texts, strict=True)]
    )
    for (k, i, t), ids, reason, grade in zip(where, full, finish, grades, strict=True):
        g = groups[k]
        g.prefix_len = g.prefix_len or [0] * len(g.response_ids)
        g.context_len = g.context_len or [0] * len(g.response_ids)
        g.origin = g.origin or [-1] * len(g.response_ids)
        g.response_ids.append(ids)
        g.finish.append(reason)
        g.grades.append(grade.grade)
        g.prefix_len.append(t)
        g.context_len.append(t if b.prefix_tokens == "context" else 0)
        g.origin.append(i)


def solve_rate_metrics(groups, easy_frac: float = 0.75, hard_frac: float = 0.25) -> dict[str, float]:
    """Generated tokens of the step and correct solutions per 1000 of them, over all prompts and over hard
    prompts (bucket of the original G rollouts' pass count); logged for every run so that runs with and
    without branching compare. A branch counts the tokens it generated (its continuation), not the prefix it
    shares with the response it branched from: ``rollout/generated_tokens`` is sum_i (L_i - prefix_i), never
    the mean response length times the rows."""
    from ares_cli.algorithms.buckets import difficulty_bucket

    correct = tokens = hard_correct = hard_tokens = 0
    for g in groups:
        origin = g.origin or [-1] * len(g.response_ids)
        prefix = g.prefix_len or [0] * len(g.response_ids)
        orig = [c for c, o in zip(g.correct, origin, strict=True) if o < 0]
        gen = sum(len(ids) - p for ids, p in zip(g.response_ids, prefix, strict=True))
        correct, tokens = correct + sum(g.correct), tokens + gen
        if difficulty_bucket(sum(orig), len(orig), easy_frac, hard_frac) == "hard":
            hard_correct, hard_tokens = hard_correct + sum(g.correct), hard_tokens + gen
    return {"rollout/generated_tokens": float(tokens), "rollout/correct_per_ktoken": 1000.0 * correct / max(tokens, 1),
            "rollout/hard_correct_per_ktoken": 1000.0 * hard_correct / max(hard_tokens, 1)}  # fmt: skip


def branch_metrics(groups, easy_frac: float = 0.75, hard_frac: float = 0.25) -> dict[str, float]:
    """Branch points per bucket (of the original G rollouts' pass count), branch responses and branch
    tokens (continuations only)."""
    from ares_cli.algorithms.buckets import BUCKETS, difficulty_bucket

    out = {f"branch/points_{d}": 0.0 for d in BUCKETS}
    out |= {"branch/points": 0.0, "branch/responses": 0.0, "branch/tokens": 0.0}
    for g in groups:
        origin = g.origin or [-1] * len(g.response_ids)
        prefix = g.prefix_len or [0] * len(g.response_ids)
        orig = [c for c, o in zip(g.correct, origin, strict=True) if o < 0]
        bucket = difficulty_bucket(sum(orig), len(orig), easy_frac, hard_frac)
        pts = {(o, p) for o, p in zip(origin, prefix, strict=True) if o >= 0}
        out[f"branch/points_{bucket}"] += len(pts)
        out["branch/points"] += len(pts)
        out["branch/responses"] += sum(o >= 0 for o in origin)
        out["branch/tokens"] += sum(len(ids) - p for ids, p, o in zip(g.response_ids, prefix, origin, strict=True)
                                    if o >= 0)  # fmt: skip
    return out
