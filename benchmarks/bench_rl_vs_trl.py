"""One GRPO step of ``ares`` against TRL's ``GRPOTrainer`` on the same model and batch; prints JSON.

Same model, prompts (toy-train), batch (``--prompts`` x ``--group`` samples, <= ``--max-new-tokens``), one
optimiser step per RL step, no reference model (TRL's default beta 0 = ``kl.coef=0``), the ``boxed_int``
grader as the reward on both sides, one torch thread. Each rep runs each side in a fresh process (ares
first on even reps, TRL first on odd ones: alternated), one warm-up step then ``--steps`` timed steps;
the report is the median over reps of each side's mean step time, its generation time (ares:
``time/generate``; TRL: its ``_generate`` call) and training time (ares: forward + backward; TRL: the
step minus ``_generate_and_score_completions``), their ratios ares / TRL, and the ratio of step time per
generated token (the sides sample different responses, of different lengths). Skipped (a JSON line saying
so) without TRL (``pip install 'ares-cli[trl]'``).

Models: ``toy`` (the toy base, ``ares_cli/toy/base``); ``llama30m``, a random Llama with a real model's
widths (hidden 512, 4 layers, 8 heads, 32k vocabulary, ~30 M parameters) and the toy tokenizer; and
``twin:NAME:LAYERS``, a shape twin of a paper model (``ares toy twin``, its real tokenizer; needs
``ares-cli[twins]``).

    .venv/bin/python benchmarks/bench_rl_vs_trl.py [--models toy,llama30m] [--reps 3] [--steps 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def llama30m(out: Path) -> Path:
    """A random Llama with real widths and the toy tokenizer (its 92 ids are the model's first 92)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ares_cli.toy.tokenizer import build_tokenizer

    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=1024,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      tie_word_embeddings=False)  # fmt: skip
    LlamaForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def model_dir(name: str, out: Path) -> Path:
    from ares_cli.toy import base_dir

    if name == "toy":
        return Path(base_dir())
    if name == "llama30m":
        return llama30m(out)
    if name.startswith("twin:"):
        from ares_cli.rehearsal.twins import build_twin

        _, twin, layers = name.split(":")
        build_twin(twin, out, layers=int(layers))
        return out
    raise SystemExit(f"unknown model {name!r}: toy, llama30m or twin:NAME:LAYERS")


def problems(n: int) -> list[dict]:
    from ares_cli.data.loader import load_problems

    return load_problems("toy-train", limit=n).records


def ares_prompts(args) -> list[dict]:
    """The prompts ares trains on, in its order: its sampler's draws over the same problem list (an
    epoch-wise permutation seeded by ``seed``), one step after another, warm-up step included. TRL is fed
    these, so both sides see the same prompts at the same step (it used to take the list's first ones)."""
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.rollout import PromptSampler

    seed = resolve_rl_config(sets=list(args.ares_set)).seed
    sampler = PromptSampler(problems(8 * (args.steps + 1) * args.prompts), seed=seed)
    return [p for _i, p in sampler.draw(0, (args.steps + 1) * args.prompts)]


def run_ares(model: Path, args, work: Path) -> dict:
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.trainer import train_rl

    sets = [f"steps={args.steps + 1}", f"rollout.prompts_per_step={args.prompts}", f"rollout.group_size={args.group}",
            f"rollout.max_new_tokens={args.max_new_tokens}", f"optim.mini_batch_size={args.prompts}", "kl.coef=0",
            "grading.workers=1", "grading.grader=boxed_int", "val.every=0", "save_every=0", "filter.mode=off",
            "rollout.backend=hf", f"rollout.batch_size={args.prompts * args.group}", *args.ares_set]  # fmt: skip
    cfg = resolve_rl_config(sets=sets)
    train_rl(cfg, model_path=model, problems=problems(8 * (args.steps + 1) * args.prompts), val_problems=None,
             out_dir=work, log=lambda _m: None)  # fmt: skip
    rows = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()][1:]  # warm-up out
    mean = lambda key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    return {"step": mean("time/step"), "generate": mean("time/generate"),
            "train": mean("time/forward") + mean("time/backward"), "grade": mean("time/grade"),
            "response_len": mean("response_len")}  # fmt: skip


def run_trl(model: Path, args, work: Path) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from ares_cli.generation import render_prompt
    from ares_cli.grading.graders import boxed_int_grade
    from ares_cli.models import load_model, load_tokenizer
    from ares_cli.training.rl.config import resolve_rl_config

    tok = load_tokenizer(model)
    r = resolve_rl_config(sets=[]).rollout  # the prompt exactly as ares renders it (chat template included)
    rows = ares_prompts(args)  # ares's prompts in ares's order (TRL does not shuffle: shuffle_dataset=False)
    data = Dataset.from_list([{"prompt": render_prompt(tok, p["problem"], system_prompt=r.system_prompt,
                                                       template=r.prompt_template), "answer": p["answer"]}
                              for p in rows])  # fmt: skip

    def reward(completions, answer, **_kw):
        return [float(boxed_int_grade(a, c) == "correct") for c, a in zip(completions, answer, strict=True)]

    n = args.prompts * args.group
    config = GRPOConfig(output_dir=str(work), per_device_train_batch_size=n, num_generations=args.group,
                        max_completion_length=args.max_new_tokens, max_steps=args.steps + 1, num_iterations=1,
                        steps_per_generation=1, gradient_accumulation_steps=1, beta=0.0, learning_rate=1e-6,
                        temperature=1.0, top_p=1.0, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
                        seed=0, bf16=False, gradient_checkpointing=False, dataloader_num_workers=0,
                        shuffle_dataset=False)  # fmt: skip
    trainer = GRPOTrainer(model=load_model(model), reward_funcs=reward, args=config, train_dataset=data,
                          processing_class=tok)  # fmt: skip
    phases: dict[str, list[float]] = {"generate": [], "rollout": [], "step": [], "response_len": []}

    def timed(name, fn):
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            phases[name].append(time.perf_counter() - t0)
            return out

        return wrapper

    trainer._generate = timed("generate", trainer._generate)
    trainer._generate_and_score_completions = timed("rollout", trainer._generate_and_score_completions)

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_a, **_kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, *_a, **_kw):
            phases["step"].append(time.perf_counter() - self.t0)

        def on_log(self, _args, _state, _control, logs=None, **_kw):
            if logs and "completions/mean_length" in logs:
                phases["response_len"].append(logs["completions/mean_length"])

    trainer.add_callback(StepTimer())
    trainer.train()
    k = len(phases["step"]) - 1  # warm-up out
    mean = lambda key: sum(phases[key][1:]) / k  # noqa: E731
    return {"step": mean("step"), "generate": mean("generate"), "train": mean("step") - mean("rollout"),
            "response_len": mean("response_len") if len(phases["response_len"]) > k else None}  # fmt: skip


def child(args) -> None:
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        fn = run_ares if args.side == "ares" else run_trl
        print(json.dumps(fn(Path(args.model), args, Path(tmp) / "run")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="toy,llama30m")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per process (after one warm-up)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--ares-set", action="append", default=[], help="extra ares --set key=value")
    parser.add_argument("--side", choices=("ares", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return child(args)
    # DeepSpeed (imported by TRL and accelerate, and by transformers through accelerate) logs to stdout
    with contextlib.redirect_stdout(sys.stderr):
        result = compare(args)
    print(json.dumps(result, indent=2))


def mean_se(values: list[float]) -> dict:
    n = len(values)
    mean = sum(values) / n
    se = statistics.stdev(values) / n**0.5 if n > 1 else float("nan")
    return {"mean": round(mean, 2), "se": round(se, 2), "n": n}


def compare(args) -> dict:
    try:
        import trl
    except ImportError:
        return {"skipped": "TRL is not installed (pip install 'ares-cli[trl]')"}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = {"trl": trl.__version__, "prompts": args.prompts, "group": args.group,
              "max_new_tokens": args.max_new_tokens, "reps": args.reps, "steps_timed": args.steps,
              "torch_threads": 1, "ares_set": args.ares_set, "models": {}}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = model_dir(name, Path(tmp) / name.replace(":", "-"))
            reps = {"ares": [], "trl": []}
            for rep in range(args.reps):
                for side in ("ares", "trl") if rep % 2 == 0 else ("trl", "ares"):
                    cmd = [sys.executable, __file__, "--side", side, "--model", str(path), "--steps", str(args.steps),
                           "--prompts", str(args.prompts), "--group", str(args.group),
                           "--max-new-tokens", str(args.max_new_tokens), *(f"--ares-set={s}" for s in args.ares_set)]  # fmt: skip
                    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                    reps[side].append(json.loads(out.strip().splitlines()[-1]))
            med = {s: {k: statistics.median(r[k] for r in reps[s] if r[k] is not None)
                       for k in ("step", "generate", "train", "response_len")} for s in reps}  # fmt: skip
            result["models"][name] = {
                "median_s": {s: {k: round(v, 3) for k, v in m.items()} for s, m in med.items()},
                "ratio_ares_to_trl": {k: round(med["ares"][k] / med["trl"][k], 3) for k in ("step", "generate", "train")},
                "step_ratio_per_rep": [round(a["step"] / t["step"], 3) for a, t in zip(reps["ares"], reps["trl"], strict=True)],
                # the sides sample different responses: the step time per generated token, as a ratio too
                "step_per_token_ratio": round(med["ares"]["step"] / med["ares"]["response_len"]
                                              / (med["trl"]["step"] / med["trl"]["response_len"]), 3),
                # the same prompts at the same steps: the length gap, paired by rep (mean ± s.e.)
                "response_len_diff_ares_minus_trl": mean_se([a["response_len"] - t["response_len"]
                                                             for a, t in zip(reps["ares"], reps["trl"], strict=True)]),
                "reps": reps,
            }  # fmt: skip
    return result


if __name__ == "__main__":
    main()
