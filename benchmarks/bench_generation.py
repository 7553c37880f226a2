"""Throughput of the hf generation backend (KV cache, batched) against a naive no-cache reference.

Prints JSON. Uses the toy model at ares_cli/toy/base/ when it exists, else a random tiny Llama with a
word-level tokenizer built in a temporary directory. EOS is disabled so every row makes exactly
`max_new_tokens` tokens in both implementations.

    .venv/bin/python benchmarks/bench_generation.py [--max-new-tokens 64] [--batch-sizes 1 32]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

TOY = Path(__file__).resolve().parents[1] / "ares_cli" / "toy" / "base"
PROBLEMS = ["what is 3 plus 4 ?", "x = 2 so what is x times x ?", "the answer is ( 9 minus 5 ) times 2"]


def build_random_model(path: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>", "<|end|>"]
    words += [str(d) for d in range(10)] + "the a is what plus minus times answer so x = ( ) ? .".split()
    core = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tok.chat_template = (
        "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|> {% endif %}"
    )
    cfg = LlamaConfig(
        vocab_size=len(words), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)


def naive_generate(model, prompts: list[list[int]], max_new_tokens: int, pad_id: int, seed: int) -> int:
    """Reference sampler: no KV cache, the whole left-padded prefix is recomputed for every token."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    gen = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits[
                :, -1
            ]
            nxt = torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=gen)
            ids, mask = torch.cat([ids, nxt], 1), torch.cat([mask, torch.ones_like(nxt)], 1)
    return len(prompts) * max_new_tokens


def timed(fn) -> tuple[float, int]:
    start = time.perf_counter()
    tokens = fn()
    return time.perf_counter() - start, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    ap.add_argument(
        "--model", type=Path, default=None, help="model dir (default: toy model or random tiny Llama)"
    )
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from ares_cli.generation import GenerationRequest, SamplingParams, get_backend, render_prompt, seed_for

    with tempfile.TemporaryDirectory() as tmp:
        model_dir, source = args.model, "--model"
        if model_dir is None:
            model_dir, source = (
                (TOY, "toy") if (TOY / "config.json").is_file() else (Path(tmp), "random-tiny-llama")
            )
            if source != "toy":
                build_random_model(model_dir)
        backend = get_backend("hf", model_dir, batch_size=max(args.batch_sizes))
        backend.eos_ids = set()  # fixed-length rows: compare equal work
        sp = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
        prompts = [render_prompt(backend.tokenizer, p) for p in PROBLEMS]
        results = []
        for bs in args.batch_sizes:
            reqs = [
                GenerationRequest(prompts[i % len(prompts)], seeds=(seed_for(0, f"p{i}", 0),), key=f"p{i}")
                for i in range(bs)
            ]
            backend.generate(reqs[:1], SamplingParams(max_new_tokens=2))  # warm-up
            kv_s, kv_tok = timed(
                lambda reqs=reqs: sum(c.n_tokens for r in backend.generate(reqs, sp) for c in r)
            )
            ids = [backend.encode(r.prompt) for r in reqs]
            nv_s, nv_tok = timed(
                lambda ids=ids: naive_generate(backend.model, ids, args.max_new_tokens, backend.pad_id, 0)
            )
            results.append(
                {
                    "batch_size": bs,
                    "new_tokens": kv_tok,
                    "hf_kv_tokens_per_s": round(kv_tok / kv_s, 1),
                    "naive_no_cache_tokens_per_s": round(nv_tok / nv_s, 1),
                    "speedup": round((kv_tok / kv_s) / (nv_tok / nv_s), 2),
                }
            )
        n_params = sum(p.numel() for p in backend.model.parameters())
        report = {
            "benchmark": "hf_generation",
            "model": source,
            "params": n_params,
            "device": str(next(backend.model.parameters()).device),
            "dtype": str(next(backend.model.parameters()).dtype),
            "torch_threads": torch.get_num_threads(),
            "machine": platform.processor() or platform.machine(),
            "max_new_tokens": args.max_new_tokens,
            "prompt_tokens": [len(backend.encode(p)) for p in prompts],
            "results": results,
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
