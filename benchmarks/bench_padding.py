"""Padding of the toy world's RL batches: padded fraction and update time for row-count micro-batches,
token-budget micro-batches (rows sorted by length) and packed sequences; prints JSON.

The batch is real: the toy base (``ares_cli/toy/base``) samples G = 8 responses to each of ``--prompts``
toy-train prompts (temperature 1, ``--max-new-tokens``). Row mode uses ``micro_batch_size`` rows in batch
order (the trainer's behaviour with ``optim.max_tokens_per_micro_batch=null``), or all rows in one
micro-batch; the ``token_budget`` mode's budget is the largest padded micro-batch the row mode builds (rows
x width), so it holds no more activations than row mode; fixed budgets of 1k, 2k and 4k tokens and the
default (``auto``: max(2048, micro_batch_size x the longest row)) complete the comparison. Time: one mini-batch of
forward + statistics + GRPO loss + backward per mode (``minibatch_backward``, best of ``--repeats``), also as
a ratio to row mode. The padded fraction counts the positions the model computes that hold no token.

    python benchmarks/bench_padding.py [--prompts 8] [--max-new-tokens 200] [--micro 4]
"""

from __future__ import annotations

import argparse
import json
import time
from types import SimpleNamespace


class _NoGrades:
    def grade(self, items):
        return [SimpleNamespace(grade="incorrect") for _ in items]


def toy_batch(prompts: int, max_new_tokens: int, seed: int = 0):
    import torch

    from ares_cli.data.loader import load_problems
    from ares_cli.generation.hf import HFBackend
    from ares_cli.models import load_model, load_tokenizer
    from ares_cli.toy import base_dir
    from ares_cli.training.rl.batch import collate
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.rollout import generate_groups

    cfg = resolve_rl_config(sets=[f"rollout.max_new_tokens={max_new_tokens}", "rollout.group_size=8"])
    tokenizer = load_tokenizer(base_dir())
    model = load_model(base_dir()).eval()
    problems = load_problems("toy-train", limit=prompts).records
    backend = HFBackend.from_model(model, tokenizer, batch_size=64)
    torch.manual_seed(seed)
    groups = generate_groups(
        backend, tokenizer, list(enumerate(problems)), cfg=cfg, seed=seed, pool=_NoGrades()
    )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return model, collate(groups, pad), cfg


def bench(args) -> dict:
    import torch

    from ares_cli.training.micro_batches import padded_fraction, plan_micro_batches
    from ares_cli.training.rl.batch import rollout_pass
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.registry import build_algorithm
    from ares_cli.training.rl.update import minibatch_backward

    model, batch, _ = toy_batch(args.prompts, args.max_new_tokens)
    p_len = batch.prompt_mask.sum(-1).tolist()
    r_len = batch.response_mask.sum(-1).long().tolist()
    rows_plan = plan_micro_batches(p_len, r_len, rows=args.micro)
    budget = max(len(g) * (max(p_len[i] for i in g) + max(r_len[i] for i in g)) for g in rows_plan)
    rows_set = [f"optim.micro_batch_size={args.micro}", "optim.max_tokens_per_micro_batch=null"]
    modes = {
        "rows": (rows_set, dict(rows=args.micro), False),
        "one_micro_batch": ([f"optim.micro_batch_size={len(p_len)}", "optim.max_tokens_per_micro_batch=null"],
                            dict(rows=len(p_len)), False),
        "token_budget": ([f"optim.max_tokens_per_micro_batch={budget}"], dict(rows=args.micro, max_tokens=budget),
                         False),
        **{f"budget_{b}": ([f"optim.max_tokens_per_micro_batch={b}"], dict(rows=args.micro, max_tokens=b), False)
           for b in (1024, 2048, 4096)},
        "auto (default)": ([], dict(rows=args.micro, max_tokens="auto", device="cpu"), False),
        "packed": ([f"optim.max_tokens_per_micro_batch={budget}", "optim.pack_sequences=true"],
                   dict(rows=args.micro, max_tokens=budget, packed=True), True),
    }  # fmt: skip
    n = len(batch)
    base = [f"rollout.prompts_per_step={args.prompts}", "rollout.group_size=8",
            f"optim.mini_batch_size={args.prompts}", "kl.coef=0"]  # fmt: skip
    out = {}
    for name, (sets, plan_kw, packed) in modes.items():
        cfg = resolve_rl_config(sets=[*base, *sets])
        algo = build_algorithm(cfg, lambda t: t)
        plan = plan_micro_batches(p_len, r_len, **plan_kw)
        rollout_pass(model, batch, stats=algo.rollout_stats(), prefix="old_", micro=args.micro, temperature=1.0,
                     max_tokens=cfg.optim.max_tokens_per_micro_batch, packed=packed)  # fmt: skip
        batch.tok.advantages = torch.linspace(-1, 1, n)[:, None].expand_as(batch.response_mask).contiguous()
        best = float("inf")
        for _ in range(args.repeats):
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            minibatch_backward(model, batch, algo, cfg, world_size=1, reduce=lambda t: t)
            best = min(best, time.perf_counter() - t0)
        out[name] = {"micro_batches": len(plan), "padded_fraction": round(padded_fraction(plan, p_len, r_len, packed), 4),
                     "update_s": round(best, 4)}  # fmt: skip
    for name in out:
        out[name]["time_ratio_to_rows"] = round(out[name]["update_s"] / out["rows"]["update_s"], 3)
    return {
        "benchmark": "rl_padding",
        "sequences": n,
        "prompt_len_mean": round(sum(p_len) / n, 1),
        "response_len_mean": round(sum(r_len) / n, 1),
        "response_len_max": max(r_len),
        "token_budget": budget,
        "micro_batch_rows": args.micro,
        "repeats": args.repeats,
        "modes": out,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=200)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(bench(args), indent=2))


if __name__ == "__main__":
    main()
