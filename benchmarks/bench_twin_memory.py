"""Peak memory of one RL micro-step and one SFT step on the full-depth Qwen2.5-0.5B shape twin (24 layers,
hidden 896, 151,936-token tied vocabulary) at 1k and 4k tokens, beside the toy base's, on CPU in fp32.

RL micro-step: forward + GRPO's statistics (log-prob, entropy) + a policy-gradient loss + backward on one
row of a 256-token prompt and an R-token response (:func:`bench_memory.micro_step`). SFT step: the SFT
loss on one sequence of T tokens (all labelled), backward, and the first AdamW step (its two moment
buffers are allocated there). Memory is the increase of the peak resident set during the step over the
resident size just before it (VmHWM after /proc/self/clear_refs), so weights are excluded and gradients,
activations, statistics temporaries and optimizer state included; ``model_mib`` gives the weights. Each
configuration runs in a fresh process. The naive reference is the logits path (``stats_path=logits``:
[T x V] float32 logits and their gradient); it runs where its estimate fits half of MemAvailable, and the
fused/logits ratio is reported. ``--gradient-checkpointing on`` (or ``both``) measures with activation
checkpointing, as the papers' recipes train (``optim.gradient_checkpointing``).

    python benchmarks/bench_twin_memory.py [--tokens 1024 4096] [--steps rl sft] [--no-toy]
        [--gradient-checkpointing off|on|both] [--paths fused logits] [--out benchmarks/results/twin_memory.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

PROMPT = 256


def _step(model_dir: str, kind: str, tokens: int, path: str, checkpointing: bool = False) -> dict:
    """One measured step in this process (the child side)."""
    import torch
    from bench_memory import micro_step, one_row_batch
    from bench_token_stats import peak_extra_mib

    from ares_cli.models import load_model
    from ares_cli.training.sft import micro_loss
    from ares_cli.training.sft_setup import param_groups

    torch.manual_seed(0)
    model = load_model(model_dir)  # fp32 on CPU, as every stage loads it there
    vocab = model.config.get_text_config().vocab_size
    if checkpointing:  # as the SFT and RL trainers enable it (activations recomputed per layer)
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
        model.train()
    model_mib = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    need, free = 3 * tokens * vocab * 4 / 2**30, _available_gib()
    if path == "logits" and need > free / 2:  # memory is checked again here: it changes on a shared machine
        return {"peak_extra_mib": None, "seconds": 0.0, "model_mib": round(model_mib, 1), "vocab": vocab,
                "skipped": f"needs ~{need:.1f} GiB > half of MemAvailable ({free:.1f} GiB) at the step"}  # fmt: skip
    if kind == "rl":
        mb = one_row_batch(tokens - PROMPT, vocab, PROMPT)
        fn = lambda: micro_step(model, mb, path)  # noqa: E731
    else:
        ids = torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(tokens))
        labels = torch.cat([ids[:, 1:], torch.full((1, 1), -100)], dim=1)
        optimizer = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-5)

        def fn():
            batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels.clone()}
            loss = micro_loss(model, batch, path) / (tokens - 1)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return float(loss.detach())

    t0 = time.perf_counter()
    peak = peak_extra_mib(fn)
    return {"peak_extra_mib": peak, "seconds": round(time.perf_counter() - t0, 2),
            "model_mib": round(model_mib, 1), "vocab": vocab}  # fmt: skip


def _measure(model_dir: str, kind: str, tokens: int, path: str, checkpointing: bool = False) -> dict:
    code = (f"import json, sys; sys.path[:0] = {[str(HERE.parent), str(HERE)]!r}; "
            f"from bench_twin_memory import _step; "
            f"print(json.dumps(_step({model_dir!r}, {kind!r}, {tokens}, {path!r}, {checkpointing!r})))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _available_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return float("inf")


def run(tokens: list[int], twin_dir: str | None = None, max_gib: float | None = None, *,
        steps: tuple[str, ...] = ("rl", "sft"), toy: bool = True,
        checkpointing: tuple[bool, ...] = (False,), paths: tuple[str, ...] = ("fused", "logits")) -> dict:  # fmt: skip
    from ares_cli.rehearsal.twins import build_twin
    from ares_cli.toy.build import base_dir

    with tempfile.TemporaryDirectory() as tmp:
        if twin_dir is None:
            twin_dir = f"{tmp}/twin"
            build_twin("qwen2.5-0.5b", twin_dir)  # full depth: 24 layers
        limit = max_gib if max_gib is not None else _available_gib() / 2
        models = [("toy", str(base_dir()))] if toy else []
        rows = []
        for model_name, model_dir in [*models, ("qwen2.5-0.5b twin", twin_dir)]:
            for kind in steps:
                for t in tokens:
                    if model_name == "toy" and t > 640:  # the toy's context: measure it at 640 tokens
                        t = 640
                    for ckpt in checkpointing:
                        row = {"model": model_name, "step": "rl_micro_step" if kind == "rl" else "sft_step",
                               "tokens": t, "gradient_checkpointing": ckpt}  # fmt: skip
                        if any(all(r[k] == row[k] for k in row) for r in rows):
                            continue
                        for path in paths:
                            estimate = 3 * t * 151936 * 4 / 2**30 if model_name != "toy" else 0.0
                            if path == "logits" and estimate > limit:
                                row["logits_skipped"] = f"needs ~{estimate:.1f} GiB > limit {limit:.1f} GiB"
                                continue
                            m = _measure(model_dir, kind, t, path, ckpt)
                            if m.get("skipped"):
                                row["logits_skipped"] = m["skipped"]
                                continue
                            row[f"{path}_peak_extra_mib"], row[f"{path}_s"] = (
                                m["peak_extra_mib"],
                                m["seconds"],
                            )
                            row["model_mib"], row["vocab"] = m["model_mib"], m["vocab"]
                        if row.get("fused_peak_extra_mib") and row.get("logits_peak_extra_mib"):
                            row["memory_ratio_fused_to_logits"] = round(
                                row["fused_peak_extra_mib"] / row["logits_peak_extra_mib"], 3
                            )
                        rows.append(row)
                        print(json.dumps(row), file=sys.stderr)
    return {
        "benchmark": "twin_step_memory",
        "machine": platform.processor() or platform.machine(),
        "prompt_tokens_rl": PROMPT,
        "dtype": "float32 (CPU)",
        "memory_measure": "peak RSS increase over RSS before the step (VmHWM after clear_refs), MiB; "
        "weights excluded (model_mib)",
        "results": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--twin", default=None, help="an existing qwen2.5-0.5b twin directory (built otherwise)")
    ap.add_argument("--max-gib", type=float, default=None, help="largest logits-path estimate to run")
    ap.add_argument("--steps", nargs="+", choices=("rl", "sft"), default=["rl", "sft"], help="which steps")
    ap.add_argument("--no-toy", action="store_true", help="measure the twin only")
    ap.add_argument("--paths", nargs="+", choices=("fused", "logits"), default=["fused", "logits"],
                    help="statistics paths to measure (logits: the naive reference)")  # fmt: skip
    ap.add_argument("--gradient-checkpointing", choices=("off", "on", "both"), default="off",
                    help="activation checkpointing during the step (the recipes' optim.gradient_checkpointing)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/twin_memory.json"))
    args = ap.parse_args()
    ckpt = {"off": (False,), "on": (True,), "both": (False, True)}[args.gradient_checkpointing]
    report = run(args.tokens, args.twin, args.max_gib, steps=tuple(args.steps), toy=not args.no_toy,
                 checkpointing=ckpt, paths=tuple(args.paths))  # fmt: skip
    text = json.dumps(report, indent=1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
