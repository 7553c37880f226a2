"""``ares plan``'s memory estimate against the measured peak of an SFT step and an RL micro-step on CPU.

Models: random-initialised models with real configurations at reduced depth: the toy model and
SmolLM2-135M's Llama config (built here from a few config values), and the Qwen2.5-0.5B (2 layers) and
Qwen2.5-Math-1.5B (1 layer) shape twins' configurations (``ares_cli/rehearsal/twins.py``). Each shape runs the
stage's own code: an RL micro-step is ``forward_stats`` (the statistics the algorithm trains on) + the
policy-gradient loss + backward with gradients and AdamW states already allocated (as in every
micro-batch after a mini-batch's first); an SFT step is two micro-batches of ``micro_loss`` + backward and
an AdamW step.

Measured peak: the largest total of live tensor storages during the step, from PyTorch's own tensor
memory accounting (``torch.distributed._tools.mem_tracker.MemTracker``: a dispatch mode that sees every
storage created and freed, forward and backward, here on the CPU device), with the model's parameters,
gradients and optimizer states registered as external tensors. This is what a GPU's caching allocator
would have to hold (``torch.cuda.max_memory_allocated``), fragmentation excluded; the estimate's
CUDA-context and fragmentation allowance is therefore left out of the comparison. The process's peak RSS
increase is printed beside it as a second, coarser view. The naive reference is a parameters-only
estimate (weights + gradients + AdamW, no activations): the ratio column shows what the activation and
head terms add.

    OMP_NUM_THREADS=1 python benchmarks/bench_plan_memory.py [--quick] [--config NAME] [--out benchmarks/results/plan_memory.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_token_stats import peak_extra_mib  # noqa: E402

# Llama configurations from a few of their values (reduced depth), or a shape twin by name.
CONFIGS = {
    "toy": dict(vocab_size=92, hidden_size=128, intermediate_size=384, num_attention_heads=4,
                num_key_value_heads=4, tie_word_embeddings=True, num_hidden_layers=4),
    "smollm2-135m-l2": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                            num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True,
                            num_hidden_layers=2),
    "qwen2.5-0.5b-l2": dict(twin="qwen2.5-0.5b", layers=2),
    "qwen2.5-math-1.5b-l1": dict(twin="qwen2.5-math-1.5b", layers=1),
}  # fmt: skip


@dataclass(frozen=True)
class Shape:
    config: str
    kind: str  # rl | sft
    rows: int
    prompt: int  # rl: prompt tokens per row; sft: prompt part of each example
    response: int
    path: str  # fused | logits
    dtype: str = "fp32"

    @property
    def label(self) -> str:
        return (
            f"{self.kind} {self.config} {self.rows}x({self.prompt}+{self.response}) {self.path} {self.dtype}"
        )


SHAPES = [
    Shape("toy", "rl", 8, 48, 400, "fused"),
    Shape("toy", "sft", 8, 48, 400, "logits"),
    Shape("smollm2-135m-l2", "rl", 2, 64, 768, "fused"),
    Shape("smollm2-135m-l2", "rl", 2, 64, 768, "logits"),
    Shape("smollm2-135m-l2", "sft", 4, 64, 320, "fused"),
    Shape("smollm2-135m-l2", "sft", 4, 64, 320, "logits"),
    Shape("qwen2.5-0.5b-l2", "rl", 1, 64, 1024, "fused"),
    Shape("qwen2.5-0.5b-l2", "rl", 1, 64, 1024, "logits"),
    Shape("qwen2.5-0.5b-l2", "sft", 2, 64, 448, "fused"),
    Shape("qwen2.5-0.5b-l2", "rl", 2, 64, 512, "fused", "bf16"),
    Shape("qwen2.5-math-1.5b-l1", "rl", 2, 64, 512, "fused", "bf16"),
    Shape("qwen2.5-math-1.5b-l1", "sft", 2, 64, 448, "logits", "bf16"),
]
QUICK = [SHAPES[0], SHAPES[1], SHAPES[2], SHAPES[5]]


def build_model(name: str, dtype: torch.dtype):
    """A random model of configuration ``name``: a shape twin's configuration, or a few values given here."""
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    values = dict(CONFIGS[name])
    torch.manual_seed(0)
    if "twin" in values:
        from ares_cli.rehearsal.twins import twin_config

        return AutoModelForCausalLM.from_config(twin_config(values["twin"], layers=values["layers"])).to(
            dtype
        )
    return LlamaForCausalLM(LlamaConfig(max_position_embeddings=4096, **values)).to(dtype)


def model_shape(model):
    """The planner's ModelShape of a live model (the same numbers its config and headers would give)."""
    from ares_cli.planning.shapes import shape_from_files

    tensors = {n: (list(p.shape), "F32") for n, p in model.state_dict().items()}
    return shape_from_files(model.config.to_dict(), tensors)


def rl_batch(shape: Shape, vocab: int):
    from ares_cli.training.rl.batch import RolloutBatch

    g = torch.Generator().manual_seed(1)
    lengths = [shape.response - 17 * r for r in range(shape.rows)]  # ragged: padding, as in real batches
    response = torch.randint(0, vocab, (shape.rows, shape.response), generator=g)
    mask = torch.zeros(shape.rows, shape.response)
    for r, n in enumerate(lengths):
        mask[r, :n] = 1
    return RolloutBatch(torch.randint(0, vocab, (shape.rows, shape.prompt), generator=g),
                        torch.ones(shape.rows, shape.prompt, dtype=torch.long), response, mask,
                        torch.zeros(shape.rows, dtype=torch.long))  # fmt: skip


def sft_examples(shape: Shape, vocab: int):
    from ares_cli.training.sft_data import IGNORE, Example

    g = torch.Generator().manual_seed(2)
    out = []
    for r in range(shape.rows):
        n = shape.prompt + shape.response - 13 * r
        ids = torch.randint(0, vocab, (n,), generator=g).tolist()
        out.append(Example(ids, [IGNORE] * shape.prompt + ids[shape.prompt :]))
    return out


def rl_micro_step(model, batch, path: str) -> None:
    from ares_cli.training.rl.batch import forward_stats

    stats = forward_stats(model, batch, stats=("logprob", "entropy"), temperature=1.0, chunk_size=128,
                          stats_path=path)  # fmt: skip
    mask = batch.response_mask
    loss = -(stats.logprob * mask).sum() / mask.sum() + 1e-3 * (stats.entropy * mask).sum() / mask.sum()
    loss.backward()


def sft_step(model, optimizer, parts, path: str, between=None) -> None:
    from ares_cli.training.sft import micro_loss
    from ares_cli.training.sft_data import collate

    for part in parts:
        if between is not None:
            between()
        batch = collate(part, pad_id=0, packed=False)
        micro_loss(model, batch, path).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def estimate(shape: Shape, ms, b: int) -> dict[str, int]:
    """The planner's estimate for this step: parameters, gradients, AdamW + the micro-step's activations."""
    from ares_cli.planning import memory

    states = memory.torch_model_states(ms.params, ms.params, param_bytes=b)
    if shape.kind == "rl":
        mb = memory.MicroBatch(rows=shape.rows, seq=shape.prompt + shape.response, keep=shape.response + 1,
                               predicted=sum(shape.response - 17 * r for r in range(shape.rows)))  # fmt: skip
        loss = "stats"
    else:
        width = shape.prompt + shape.response
        mb = memory.MicroBatch(rows=shape.rows // 2, seq=width, keep=shape.response,
                               predicted=sum(shape.response - 13 * r for r in range(shape.rows // 2)))  # fmt: skip
        loss = "ce"
    acts = memory.update_terms(ms, mb, b, path=shape.path, chunk=128, loss=loss, checkpointing=False)
    persistent = memory.total(states)
    step = memory.optimizer_step_transient(ms.params) if shape.kind == "sft" else 0
    return {"estimate": persistent + max(memory.total(acts), step), "params_only": persistent,
            **{t.name: t.bytes for t in acts}}  # fmt: skip


def measure(shape: Shape) -> dict:
    from torch.distributed._tools.mem_tracker import MemTracker

    dtype = torch.bfloat16 if shape.dtype == "bf16" else torch.float32
    model = build_model(shape.config, dtype)
    ms = model_shape(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    vocab = model.config.vocab_size
    if shape.kind == "rl":
        batch = rl_batch(shape, vocab)
        rl_micro_step(model, batch, shape.path)  # gradients exist from here on
        optimizer.step()  # AdamW states exist
        for p in model.parameters():
            p.grad.zero_()

        def step(tracker=None):
            return rl_micro_step(model, batch, shape.path)
    else:
        examples = sft_examples(shape, vocab)
        half = shape.rows // 2
        parts = [examples[:half], examples[half:]]
        sft_step(model, optimizer, parts, shape.path)  # AdamW states exist

        def step(tracker=None):
            return sft_step(model, optimizer, parts, shape.path, tracker and tracker.reset_mod_stats)

    gc.collect()
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        step(tracker)
    peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
    measured = int(peak["Total"])
    rss = peak_extra_mib(step)
    est = estimate(shape, ms, 2 if dtype == torch.bfloat16 else 4)
    return {
        "shape": shape.label, "params": ms.params, "measured_peak_mib": round(measured / 2**20, 1),
        "estimated_peak_mib": round(est["estimate"] / 2**20, 1),
        "ratio_estimate_to_measured": round(est["estimate"] / measured, 3),
        "ratio_params_only_to_measured": round(est["params_only"] / measured, 3),
        "estimate_terms_mib": {k: round(v / 2**20, 1) for k, v in est.items()},
        "rss_peak_increase_mib": rss,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="four small shapes (seconds)")
    ap.add_argument("--config", choices=sorted(CONFIGS), help="only the shapes of this configuration")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/plan_memory.json"))
    args = ap.parse_args()
    rows = []
    for shape in QUICK if args.quick else SHAPES:
        if args.config and shape.config != args.config:
            continue
        rows.append(measure(shape))
        gc.collect()  # the last shape's model and optimizer are gone before the next is built
    within = [abs(r["ratio_estimate_to_measured"] - 1) <= 0.25 for r in rows]
    report = {
        "benchmark": "plan_memory_estimate", "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
        "measure": "peak live tensor bytes (torch MemTracker, CPU), params/grads/AdamW registered",
        "shapes": len(rows), "within_25_percent": sum(within), "results": rows,
    }  # fmt: skip
    text = json.dumps(report, indent=1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
