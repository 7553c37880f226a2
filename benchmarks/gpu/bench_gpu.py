"""GPU measurements for ``benchmarks/gpu/run.sh``; each sub-command prints (and writes) one JSON object.

``head``: the statistics of R response tokens from final hidden states with Qwen2.5-7B's lm_head shape
(hidden 3584, vocabulary 152,064), bf16, GRPO's statistics (log-prob + entropy) and a loss, forward and
backward: the fused path (``fused_token_stats``, chunked, recomputed in backward) against the logits path
(full [R x V] logits, then ``token_stats``). Peak memory above the inputs (``torch.cuda.max_memory_allocated``)
and time (median of ``--repeats`` after a warm-up), and their ratios.

``rl_step``: one RL step of a random-initialised Qwen2.5-1.5B-config model in bf16 with gradient
checkpointing at a ``--response``-token response: the no-grad pass of the policy (old log-probs), of the
reference, then forward + backward + AdamW step of the policy, through the trainer's own functions
(``rollout_pass``, ``minibatch_backward``, ``optimizer_step``). Tokens/s over the whole step and MFU = model
FLOPs / (time x peak), model FLOPs = 2 N T per no-grad forward and 6 N T for the update (N non-embedding
parameters + the lm_head, T tokens) plus the attention terms; gradient-checkpointing recompute is not
counted (it is overhead, not model work). Peak: ``--peak-tflops`` (H200 dense bf16: 989).

``--tiny`` shrinks every shape so both sub-commands run on CPU in seconds (the test of this script).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak_reset(device: str) -> int:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    return 0


def _peak_mib(device: str, base: int) -> float | None:
    if device.startswith("cuda"):
        return round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
    return None  # CPU: see benchmarks/bench_memory.py for RSS-based peaks


def _median_seconds(fn, device: str, repeats: int, after=lambda: None) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, synchronised around each; ``after`` runs
    between calls, outside the timing (e.g. clearing gradients)."""
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
        after()
    return statistics.median(times)


def _head_row(r: int, weight, args, g) -> dict:
    """Fused and logits path at ``r`` response tokens: median time and peak memory above the inputs."""
    from ares_cli.algorithms.token_stats import fused_token_stats, token_stats

    device, dtype = args.device, weight.dtype
    vocab, hidden = weight.shape
    h = (torch.randn(r, hidden, device=device, generator=g) * 2).to(dtype).requires_grad_()
    y = torch.randint(0, vocab, (r,), device=device, generator=g)
    adv = torch.randn(r, device=device, generator=g)

    def fused():
        s = fused_token_stats(h, weight, y, stats=("logprob", "entropy"), chunk_size=args.chunk_size)
        ((s.logprob * adv).sum() + s.entropy.sum() * 0).backward()

    def logits():
        s = token_stats(h @ weight.t(), y, stats=("logprob", "entropy"), chunk_size=args.chunk_size)
        ((s.logprob * adv).sum() + s.entropy.sum() * 0).backward()

    def clear():
        h.grad = weight.grad = None

    row = {"response_tokens": r}
    for name, fn in (("fused", fused), ("logits", logits)):
        fn()  # warm-up
        clear()
        base = _peak_reset(device)
        row[f"{name}_s"] = round(_median_seconds(fn, device, args.repeats, after=clear), 5)
        row[f"{name}_peak_mib"] = _peak_mib(device, base)
    row["time_ratio_fused_to_logits"] = round(row["fused_s"] / row["logits_s"], 3)
    if row["fused_peak_mib"] is not None and row["logits_peak_mib"]:
        row["memory_ratio_fused_to_logits"] = round(row["fused_peak_mib"] / row["logits_peak_mib"], 4)
    return row


def head(args) -> dict:
    device, dtype = args.device, getattr(torch, args.dtype)
    hidden, vocab = (32, 1000) if args.tiny else (3584, 152064)
    tokens = [64, 128] if args.tiny else args.tokens
    g = torch.Generator(device=device).manual_seed(0)
    weight = (
        (torch.randn(vocab, hidden, device=device, generator=g) * hidden**-0.5).to(dtype).requires_grad_()
    )
    rows = [_head_row(r, weight, args, g) for r in tokens]
    return {"benchmark": "gpu_head", "device": _device_name(device), "dtype": args.dtype, "hidden": hidden,
            "vocab": vocab, "chunk_size": args.chunk_size, "repeats": args.repeats, "results": rows}  # fmt: skip


def _qwen_1p5b(tiny: bool, dtype, device: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if tiny:
        cfg = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                          max_position_embeddings=4096)  # fmt: skip
    else:  # Qwen2.5-1.5B's config.json
        cfg = Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                          num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True,
                          max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6)  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(dtype)
    return model, cfg


def model_flops(cfg, prompt: int, response: int, rows: int) -> dict[str, float]:
    """Forward FLOPs of one pass: 2 x matmul parameters x tokens + causal attention (QK^T and AV)."""
    h, layers = cfg.hidden_size, cfg.num_hidden_layers
    kv = cfg.num_key_value_heads * (h // cfg.num_attention_heads)
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * cfg.intermediate_size  # q, o, k, v, gate/up/down
    n_matmul = layers * per_layer
    t = prompt + response
    dense = 2 * n_matmul * t * rows
    attention = 2 * 2 * layers * h * t * t / 2 * rows  # causal: half of T^2
    head_fwd = 2 * h * cfg.vocab_size * response * rows  # only response positions are projected
    return {"forward": dense + attention + head_fwd}


def rl_step(args) -> dict:
    from ares_cli.training.rl.batch import RolloutBatch, rollout_pass
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.registry import build_algorithm
    from ares_cli.training.rl.update import minibatch_backward, optimizer_step

    device, dtype = args.device, getattr(torch, args.dtype)
    prompt, response, rows = (16, 64, 2) if args.tiny else (args.prompt, args.response, args.rows)
    policy, mcfg = _qwen_1p5b(args.tiny, dtype, device)
    ref, _ = _qwen_1p5b(args.tiny, dtype, device)
    ref.eval().requires_grad_(False)
    (getattr(policy, "activation_checkpointing_enable", None) or policy.gradient_checkpointing_enable)()
    policy.config.use_cache = False
    cfg = resolve_rl_config(sets=["rollout.group_size=2", "rollout.prompts_per_step=1", "optim.mini_batch_size=1",
                                  f"optim.micro_batch_size={rows}", f"optim.stats_path={args.stats_path}",
                                  "optim.lr=1e-6", "kl.coef=0.001"])  # fmt: skip
    algo = build_algorithm(cfg, lambda t: t)
    g = torch.Generator(device=device).manual_seed(0)
    v = mcfg.vocab_size

    def batch():
        b = RolloutBatch(
            torch.randint(0, v, (rows, prompt), device=device, generator=g),
            torch.ones(rows, prompt, dtype=torch.long, device=device),
            torch.randint(0, v, (rows, response), device=device, generator=g),
            torch.ones(rows, response, device=device), torch.zeros(rows, dtype=torch.long, device=device),
        )  # fmt: skip
        b.seq.correct = torch.ones(rows, device=device)
        return b

    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-6)
    kw = dict(temperature=1.0, micro=rows, stats_path=args.stats_path, chunk_size=cfg.loss.chunk_size)

    def step():
        b = batch()
        policy.eval()
        rollout_pass(policy, b, stats=algo.rollout_stats(), prefix="old_", **kw)
        rollout_pass(ref, b, stats=("logprob",), prefix="ref_", **kw)
        b.tok.advantages = torch.linspace(-1, 1, rows, device=device)[:, None].expand_as(b.response_mask)
        b.tok.advantages = b.tok.advantages.contiguous()
        algo.prepare(b)
        policy.train()
        minibatch_backward(policy, b, algo, cfg, world_size=1, reduce=lambda t: t)
        return optimizer_step(policy, None, optimizer, cfg.optim)

    step()  # warm-up (allocator, kernels, optimizer state)
    base = _peak_reset(device)
    dt = _median_seconds(step, device, args.repeats)
    fwd = model_flops(mcfg, prompt, response, rows)["forward"]
    flops = 2 * fwd + 3 * fwd  # two no-grad forwards (old policy, reference) + forward/backward of the update
    tokens = rows * (prompt + response)
    return {
        "benchmark": "gpu_rl_step", "device": _device_name(device), "dtype": args.dtype,
        "model": "tiny Qwen2 (CPU check)" if args.tiny else "Qwen2.5-1.5B config, random init",
        "gradient_checkpointing": True, "stats_path": args.stats_path, "rows": rows, "prompt_tokens": prompt,
        "response_tokens": response, "step_s": round(dt, 4), "tokens_per_s": round(tokens / dt, 1),
        "model_tflops_per_step": float(f"{flops / 1e12:.4g}"), "peak_tflops": args.peak_tflops,
        "mfu": float(f"{flops / dt / (args.peak_tflops * 1e12):.4g}"), "peak_mib": _peak_mib(device, base),
    }  # fmt: skip


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["head", "rl_step"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (runs on CPU in seconds)")
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 8192, 16384])
    ap.add_argument("--chunk-size", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--response", type=int, default=4096)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--stats-path", default="fused", choices=["fused", "logits"])
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    report = head(args) if args.what == "head" else rl_step(args)
    text = json.dumps(report, indent=1)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return report


if __name__ == "__main__":
    main()
