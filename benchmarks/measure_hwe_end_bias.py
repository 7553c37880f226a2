"""How often each AEPO end-of-response rule flags a high-entropy window near the end of a response; prints JSON.

Samples G responses for each of the first N toy-train prompts at T = 1 from ``--model`` (the toy SFT model,
or any causal LM directory), takes the trainer's full-vocabulary token entropies, the batch threshold τ
(mean of per-response 95th percentiles, sec. 3.2.1) and window w = 4 (eq. 4/12), and reports the fraction
of positions flagged (H̄_{t:w} ≥ τ) inside a response (at least w tokens before its end) and at each of its
last w positions, under ``end_rule="shrink"`` (the window shrinks to the tokens that exist) and
``"full"`` (only complete windows may start one). Not a speed benchmark: a measurement docs/methods.md cites.

    .venv/bin/python benchmarks/measure_hwe_end_bias.py --model <dir> [--prompts 64] [--group 8]
    .venv/bin/python benchmarks/measure_hwe_end_bias.py --synthetic [--responses 4096] [--length 100]

``--synthetic`` replaces the model by i.i.d. Exponential(1) token entropies (every position alike), which
isolates the rule's own effect: a shrunk window averages fewer values, so its mean crosses τ more often.
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    import torch

    from ares_cli.data.loader import load_problems
    from ares_cli.generation import GenerationRequest, SamplingParams, render_prompt, seed_for
    from ares_cli.generation.hf import HFBackend
    from ares_cli.models import load_model
    from ares_cli.training.rl.batch import collate, rollout_pass
    from ares_cli.training.rl.rollout import Group

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--responses", type=int, default=4096)
    ap.add_argument("--length", type=int, default=100)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)

    if args.synthetic:
        gen = torch.Generator().manual_seed(args.seed)
        ent = torch.empty(args.responses, args.length, dtype=torch.float64).exponential_(1.0, generator=gen)
        report(ent, torch.ones_like(ent), args, "synthetic iid Exponential(1)")
        return
    if not args.model:
        ap.error("--model or --synthetic is required")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = load_model(args.model).eval()
    backend = HFBackend.from_model(model, tokenizer, batch_size=64)
    problems = load_problems("toy-train", limit=args.prompts).records
    requests = [GenerationRequest(prompt=render_prompt(tokenizer, p["problem"]),
                                  seeds=tuple(seed_for(args.seed, p["id"], i) for i in range(args.group)),
                                  key=p["id"]) for p in problems]  # fmt: skip
    completions = backend.generate(
        requests, SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    )
    groups = [Group(i, p["id"], tokenizer(r.prompt, add_special_tokens=False)["input_ids"],
                    [list(c.token_ids) for c in comps], [c.finish_reason for c in comps], ["n/a"] * len(comps))
              for i, (p, r, comps) in enumerate(zip(problems, requests, completions, strict=True))]  # fmt: skip
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = collate(groups, pad)
    rollout_pass(model, batch, stats=("entropy",), prefix="", micro=16, temperature=1.0)
    report(batch.tok.entropy, batch.response_mask, args, args.model)


def report(ent, mask, args, source: str) -> None:
    """Flag rates inside a response and at each of its last w positions, under both end rules (JSON)."""
    import torch

    from ares_cli.algorithms.aepo import batch_threshold, full_window_starts, hwe_mask, window_entropy

    tau = batch_threshold(ent, mask, 0.95)
    win = window_entropy(ent, mask, args.window)
    lengths = mask.sum(1, keepdim=True).long()
    from_end = lengths - 1 - torch.arange(mask.shape[1])[None]  # 0 = last token
    out: dict[str, object] = {"source": source, "responses": int(mask.shape[0]), "window": args.window,
                              "threshold": float(tau), "mean_len": float(lengths.float().mean())}  # fmt: skip
    for rule in ("shrink", "full"):
        eligible = mask.bool() if rule == "shrink" else full_window_starts(mask, args.window)
        flags = hwe_mask(win, eligible, tau)
        inside = mask.bool() & (from_end >= args.window)
        row = {"inside": float(flags[inside].float().mean())}
        for k in range(args.window):
            at = mask.bool() & (from_end == k)
            row[f"last_{k + 1}"] = float(flags[at].float().mean()) if at.any() else None
        row["windows_per_response"] = float(flags.sum(1).float().mean())
        out[rule] = row
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
