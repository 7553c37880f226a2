"""The vllm backend on one GPU as ``ares rl`` builds it (in-process engine, sleep mode), for
``benchmarks/gpu/run.sh``; prints (and writes) one JSON object. Needs a CUDA GPU, vllm and a model directory
(run.sh makes the Qwen2.5-0.5B shape twin with ``ares toy twin``).

1. Sleep / wake: free GPU memory (``torch.cuda.mem_get_info``) with the engine awake, asleep (level 1), with
   its weights woken, and with its KV cache woken too.
2. Weight sync: a transformers copy of the model in bf16 is perturbed (every weight scaled by 1 + 0.2 x
   noise); the engine samples before and after ``sync_weights``, and the log-probs it reports for its own
   tokens are compared with the trainer's (``log_softmax`` of the perturbed model's logits, float32) on the
   same tokens. Before the sync they disagree (stale weights); after it they must agree to bf16 tolerance
   (``--tolerance``, mean absolute difference per token). ``pass`` says whether both held.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def trainer_logprobs(model, prompt_ids: list[int], completion) -> list[float]:
    """The model's log-probs of ``completion``'s tokens after ``prompt_ids`` (float32 log-softmax)."""
    import torch

    ids = torch.tensor([prompt_ids + completion.token_ids], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    picked = torch.log_softmax(logits, -1).gather(1, ids[0, len(prompt_ids) :, None])[:, 0]
    return picked.tolist()


def gap(model, tokenizer, backend, prompts: list[str], sampling) -> dict:
    """Mean and max |engine log-prob - trainer log-prob| over every sampled token of ``prompts``."""
    from ares_cli.generation import GenerationRequest

    outs = backend.generate(
        [GenerationRequest(prompt=p, seeds=(i,)) for i, p in enumerate(prompts)], sampling
    )
    diffs = []
    for prompt, comps in zip(prompts, outs, strict=True):
        ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        mine = trainer_logprobs(model, ids, comps[0])
        diffs += [abs(a - b) for a, b in zip(comps[0].logprobs, mine, strict=True)]
    return {
        "tokens": len(diffs),
        "mean_abs": sum(diffs) / max(1, len(diffs)),
        "max_abs": max(diffs, default=0.0),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--utilization", type=float, default=0.3)
    ap.add_argument("--tolerance", type=float, default=0.02, help="mean |difference| per token after a sync")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ares_cli.generation import SamplingParams
    from ares_cli.generation.vllm_backend import VLLMBackend

    def free() -> int:
        torch.cuda.synchronize()
        return int(torch.cuda.mem_get_info()[0])

    total = int(torch.cuda.mem_get_info()[1])
    backend = VLLMBackend(args.model, seed=0, gpu_memory_utilization=args.utilization, max_model_len=1024,
                          sleep_mode=True)  # fmt: skip
    memory = {"total": total, "free_awake": free()}
    backend.sleep()
    memory["free_asleep"] = free()
    backend.wake_up(["weights"])
    memory["free_weights_woken"] = free()
    backend.wake_up(["kv_cache"])
    memory["free_all_woken"] = free()
    memory["released_by_sleep"] = memory["free_asleep"] - memory["free_awake"]

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).cuda().eval()
    gen = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(
                1 + 0.2 * torch.randn(p.shape, generator=gen, device="cuda", dtype=torch.float32).to(p.dtype)
            )
    prompts = ["The answer to 12 + 30 is", "Write the first prime numbers:", "Once upon a time"]
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=32)
    before = gap(model, tokenizer, backend, prompts, sampling)
    torch.cuda.reset_peak_memory_stats()
    allocated = torch.cuda.memory_allocated()
    backend.sleep()
    backend.sync_weights(model)  # wakes the weights, loads one parameter at a time, wakes the KV cache
    sync_extra = torch.cuda.max_memory_allocated() - allocated
    after = gap(model, tokenizer, backend, prompts, sampling)
    largest = max(p.numel() * p.element_size() for p in model.parameters())
    result = {
        "memory": memory, "before_sync": before, "after_sync": after, "tolerance": args.tolerance,
        "sync_peak_extra_bytes_torch": int(sync_extra), "largest_parameter_bytes": int(largest),
        "pass": after["mean_abs"] <= args.tolerance and before["mean_abs"] > 5 * after["mean_abs"]
        and memory["released_by_sleep"] > 0,
    }  # fmt: skip
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    sys.exit(0 if result["pass"] else 1)


if __name__ == "__main__":
    main()
