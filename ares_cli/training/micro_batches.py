"""Micro-batches of one optimiser step, planned by rows or by a token budget (pure; SFT and RL share it).

By a row count: consecutive ``rows``-sized slices. By a token budget: rows sorted by length (longest
first) and filled greedily while the micro-batch's cost stays within the budget; the cost of a padded
micro-batch is rows x (longest prompt + longest response), what the model really computes, of a packed
one the sum of the sequence lengths. A row longer than the budget gets a micro-batch of its own. The
losses are normalised by the whole step's counts, so every plan gives the same gradient up to float
summation order.
"""

from __future__ import annotations

# tokens: the floor of the GPU rule, and the whole budget on a CPU
AUTO_BUDGET = 2048
# tokens: the fastest budget on a CPU, on the toy RL step at 1k / 2k / 4k / one micro-batch
# (benchmarks/bench_padding.py --micro 64, docs/performance.md)
CPU_AUTO_BUDGET = 2048


def token_budget(
    setting: int | str | None, row_lengths: list[int], rows: int, device: str = "cuda"
) -> int | None:
    """The token budget a plan uses: ``setting`` itself when it is a number, or None (a row count).

    ``"auto"`` depends on the device (``device``: a torch device string or type). On a CPU it is
    ``CPU_AUTO_BUDGET``: there a pass costs about its tokens, and a larger one only pads more. On a GPU it is
    ``max(AUTO_BUDGET, rows x the longest row)``: ``rows`` (``micro_batch_size``) of the longest row is the
    micro-batch the plan's memory estimate checks against the GPU (``ares plan``,
    ``planning.rl.rl_micro_batch``), so "auto" holds no more activations than that estimate, and
    packs more of the shorter rows into each pass, where fewer, larger passes are cheaper."""
    if setting != "auto":
        return setting
    if str(device).split(":")[0] == "cpu":
        return CPU_AUTO_BUDGET
    return max(AUTO_BUDGET, rows * max(row_lengths, default=0))


def per_micro_batch_statistics(loss) -> bool:
    """Whether the loss takes statistics over each micro-batch (Clip-Cov / KL-Cov covariances and random
    selection, the 80/20 top-entropy threshold): then which rows share a micro-batch changes the gradient.
    The loss's registry entry and its constants declare it (``micro_batch_statistics``); ``loss`` is an RL
    config's ``loss`` section."""
    from ares_cli.algorithms.policy_loss_core import takes_micro_batch_statistics

    return takes_micro_batch_statistics(loss.policy_loss, loss)


def budget_setting(cfg) -> int | str | None:
    """An RL config's ``optim.max_tokens_per_micro_batch`` as the planner reads it: ``"auto"`` falls back to
    ``micro_batch_size`` rows (None) for a loss with per-micro-batch statistics, so the default never
    changes those losses' gradients."""
    setting = cfg.optim.max_tokens_per_micro_batch
    return None if setting == "auto" and per_micro_batch_statistics(cfg.loss) else setting


def plan_micro_batches(
    prompt_lens: list[int],
    response_lens: list[int],
    *,
    rows: int,
    max_tokens: int | str | None = None,
    packed: bool = False,
    device: str = "cuda",
) -> list[list[int]]:
    """Row indices of each micro-batch (see the module docstring); every row appears exactly once.
    ``device`` is where the passes run: it decides what ``max_tokens="auto"`` means (:func:`token_budget`)."""
    n = len(prompt_lens)
    max_tokens = token_budget(
        max_tokens, [p + r for p, r in zip(prompt_lens, response_lens, strict=True)], rows, device
    )
    if max_tokens is None and not packed:
        return [list(range(s, min(s + rows, n))) for s in range(0, n, rows)]
    order = sorted(range(n), key=lambda i: -(prompt_lens[i] + response_lens[i]))
    groups: list[list[int]] = []
    cur: list[int] = []
    cost_p = cost_r = total = 0
    for i in order:
        p, r = max(cost_p, prompt_lens[i]), max(cost_r, response_lens[i])
        t = total + prompt_lens[i] + response_lens[i]
        cost = t if packed else (len(cur) + 1) * (p + r)
        over = cost > max_tokens if max_tokens is not None else len(cur) + 1 > rows
        if cur and over:
            groups.append(sorted(cur))
            cur, p, r, t = [], prompt_lens[i], response_lens[i], prompt_lens[i] + response_lens[i]
        cur.append(i)
        cost_p, cost_r, total = p, r, t
    if cur:
        groups.append(sorted(cur))
    return groups


def equalise(groups: list[list[int]], target: int) -> list[list[int]]:
    """``target`` micro-batches: the largest is halved until the count is reached; where no group can
    be split any more, empty groups (a zero-weight pass) are appended. Ranks of DeepSpeed ZeRO must run
    the same number of forward/backward passes."""
    groups = [list(g) for g in groups]
    while len(groups) < target:
        big = max(range(len(groups)), key=lambda k: len(groups[k])) if groups else None
        if big is None or len(groups[big]) < 2:
            groups.append([])
            continue
        g = groups.pop(big)
        groups[big:big] = [g[: len(g) // 2], g[len(g) // 2 :]]
    return groups


def padded_fraction(groups: list[list[int]], prompt_lens, response_lens, packed: bool) -> float:
    """Fraction of the computed positions that are padding under a plan."""
    computed = real = 0
    for g in groups:
        if not g:
            continue
        lens = [prompt_lens[i] + response_lens[i] for i in g]
        real += sum(lens)
        computed += (
            sum(lens)
            if packed
            else len(g) * (max(prompt_lens[i] for i in g) + max(response_lens[i] for i in g))
        )
    return 1.0 - real / computed if computed else 0.0
