"""RL step time on the toy world, split into generate / grade / forward / backward; prints JSON.

Uses the toy base (``ares_cli/toy/base``) when it exists, else a tiny random Llama with the toy tokenizer.
GRPO is the reference; AEPO and PAEC are also reported as ratios of their per-phase time to GRPO's.

    .venv/bin/python benchmarks/bench_rl_step.py [--steps 3] [--prompts 4] [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

PHASES = ("generate", "grade", "forward", "backward", "step")


def model_dir(tmp: Path) -> tuple[Path, str]:
    from ares_cli.toy import base_dir

    base = base_dir()
    if (Path(base) / "config.json").is_file():
        return Path(base), "toy-base"
    from ares_cli.toy.model import ToyModelShape, build_model
    from ares_cli.toy.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    model = build_model(tokenizer, ToyModelShape(), seed=0)
    model.save_pretrained(tmp / "model")
    tokenizer.save_pretrained(tmp / "model")
    return tmp / "model", "random toy-shaped Llama (no toy base yet)"


def bench(algo: str, model: Path, out: Path, args) -> dict[str, float]:
    from ares_cli.data.loader import load_problems
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.trainer import train_rl

    cfg = resolve_rl_config(
        sets=[
            f"algo={algo}",
            f"steps={args.steps}",
            f"rollout.prompts_per_step={args.prompts}",
            "rollout.group_size=8",
            f"rollout.max_new_tokens={args.max_new_tokens}",
            f"optim.mini_batch_size={args.prompts}",
            "optim.micro_batch_size=16",
            "grading.workers=1",
            "val.every=0",
            "save_every=0",
            "filter.mode=off",
        ]
    )
    train_rl(
        cfg,
        model_path=model,
        problems=load_problems("toy-train", limit=200).records,
        val_problems=None,
        out_dir=out,
        log=lambda _m: None,
    )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][1:]  # skip warm-up
    return {p: round(sum(r[f"time/{p}"] for r in rows) / len(rows), 4) for p in PHASES} | {
        "response_len": round(sum(r["response_len"] for r in rows) / len(rows), 1)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model, label = model_dir(Path(tmp))
        result = {
            "model": label,
            "steps_timed": args.steps - 1,
            "prompts": args.prompts,
            "group_size": 8,
            "max_new_tokens": args.max_new_tokens,
            "seconds_per_step": {},
            "ratio_to_grpo": {},
        }
        for algo in ("grpo", "aepo", "paec"):
            result["seconds_per_step"][algo] = bench(algo, model, Path(tmp) / algo, args)
        grpo = result["seconds_per_step"]["grpo"]
        for algo in ("aepo", "paec"):
            mine = result["seconds_per_step"][algo]
            result["ratio_to_grpo"][algo] = {
                p: round(mine[p] / grpo[p], 3) if grpo[p] else None for p in ("forward", "backward", "step")
            }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
