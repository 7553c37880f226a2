"""One RL (AEPO) step of a random-initialised Qwen2.5-VL-3B-shaped model with one 448x448 image and a
4k-token response: peak GPU memory and step time, against the same step on text alone; prints JSON.

The step is the trainer's: old-policy statistics pass (no grad), AEPO's hooks, one mini-batch forward +
backward through :func:`ares_cli.training.rl.update.minibatch_backward`, AdamW step. Weights are random
(Qwen2.5-VL-3B-Instruct's configuration, bf16 on CUDA), so no download is needed; the response tokens are
random text ids (a generated 4k response costs the same to score and train on).

    python benchmarks/gpu/vl_rl_step.py              # CUDA: the 3B shape, 448x448, 4096 response tokens
    python benchmarks/gpu/vl_rl_step.py --tiny       # CPU-sized shapes (used by the tests)
"""

from __future__ import annotations

import argparse
import json
import time

# Qwen2.5-VL-3B-Instruct's config.json (text and vision parts; token ids of its tokenizer).
QWEN25_VL_3B = {
    "text": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
             "num_attention_heads": 16, "num_key_value_heads": 2, "max_position_embeddings": 128000,
             "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
             "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
             "bos_token_id": 151643, "eos_token_id": 151645},
    "vision": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "out_hidden_size": 2048,
               "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
               "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2},
    "ids": {"image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
            "vision_end_token_id": 151653},
}  # fmt: skip


def build_config(tiny: bool):
    from transformers import Qwen2_5_VLConfig

    if tiny:
        from ares_cli.toy.tiny_vl import VLShape, build_vl_tokenizer, vl_config

        return vl_config(build_vl_tokenizer(), VLShape())
    spec = QWEN25_VL_3B
    return Qwen2_5_VLConfig(text_config=spec["text"], vision_config=spec["vision"], tie_word_embeddings=True,
                            **spec["ids"])  # fmt: skip


def image_inputs(side: int, max_pixels: int):
    """VisionInputs of one synthetic side x side image (a gradient, so patches differ)."""
    import numpy as np
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from ares_cli.models.vision import VisionInputs

    grid = np.add.outer(np.arange(side), np.arange(side)) % 256
    image = Image.fromarray(np.stack([grid, grid[::-1], 255 - grid], -1).astype("uint8"))
    proc = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=max_pixels, patch_size=14, merge_size=2,
                                    temporal_patch_size=2)  # fmt: skip
    out = proc(images=[image], return_tensors="pt")
    return VisionInputs(out["pixel_values"], out["image_grid_thw"], ("synthetic",))


def one_step(model, config, *, with_image: bool, side: int, response: int, max_pixels: int, device, seed=0):
    """Seconds and peak bytes of one AEPO step on one prompt (+ image) and one ``response``-token answer."""
    import torch

    from ares_cli.training.rl.batch import collate, rollout_pass
    from ares_cli.training.rl.config import resolve_rl_config
    from ares_cli.training.rl.registry import build_algorithm
    from ares_cli.training.rl.rollout import Group
    from ares_cli.training.rl.update import minibatch_backward

    gen = torch.Generator().manual_seed(seed)
    text_vocab = min(config.vision_start_token_id, config.text_config.vocab_size) - 1
    prompt = torch.randint(10, text_vocab, (64,), generator=gen).tolist()
    vision = None
    if with_image:
        vision = image_inputs(side, max_pixels)
        n = int(vision.image_grid_thw.prod()) // config.vision_config.spatial_merge_size**2
        image = [config.vision_start_token_id] + [config.image_token_id] * n + [config.vision_end_token_id]
        prompt = prompt[:8] + image + prompt[8:]
    answer = torch.randint(10, text_vocab, (response,), generator=gen).tolist()
    cfg = resolve_rl_config(sets=["algo=aepo", "rollout.group_size=2", f"rollout.max_new_tokens={response}",
                                  "optim.micro_batch_size=1", "optim.mini_batch_size=1"])  # fmt: skip
    algo = build_algorithm(cfg, lambda t: t)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    sync()
    start = time.perf_counter()
    batch = collate([Group(0, "p", prompt, [answer], ["length"], ["correct"])], pad_id=0).to(device)
    batch.vision = [vision.to(device)] if vision is not None else None
    batch.seq.correct = torch.ones(1, device=device)
    batch.seq.base_reward = torch.ones(1, device=device)
    top_p, top_k = algo.nucleus
    rollout_pass(model, batch, stats=algo.rollout_stats(), prefix="old_", micro=1, temperature=1.0, top_p=top_p,
                 top_k=top_k, chunk_size=cfg.loss.chunk_size)  # fmt: skip
    algo.prepare(batch)
    batch.tok.advantages = batch.response_mask.clone()  # one response: a unit advantage on every token
    minibatch_backward(model, batch, algo, cfg, world_size=1, reduce=lambda t: t)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    sync()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    tokens = int(batch.prompt_mask.sum() + batch.response_mask.sum())
    return {"step_s": round(seconds, 3), "peak_bytes": peak, "tokens": tokens}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (CPU smoke run)")
    parser.add_argument("--side", type=int, default=None, help="image side in pixels (448; tiny: 56)")
    parser.add_argument("--response", type=int, default=None, help="response tokens (4096; tiny: 32)")
    args = parser.parse_args(argv)
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    side = args.side or (56 if args.tiny else 448)
    response = args.response or (32 if args.tiny else 4096)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    config = build_config(args.tiny)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=dtype)
    model.train()
    max_pixels = 16384 * 28 * 28
    one_step(model, config, with_image=True, side=side, response=min(response, 16), max_pixels=max_pixels,
             device=device)  # warm-up (kernels, allocator)  # fmt: skip
    vl = one_step(
        model, config, with_image=True, side=side, response=response, max_pixels=max_pixels, device=device
    )
    text = one_step(model, config, with_image=False, side=side, response=response, max_pixels=max_pixels,
                    device=device)  # fmt: skip
    result = {
        "benchmark": "vl_rl_step",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "shape": "tiny" if args.tiny else "qwen2.5-vl-3b (random init)",
        "dtype": str(dtype).removeprefix("torch."),
        "params": sum(p.numel() for p in model.parameters()),
        "image_side": side,
        "response_tokens": response,
        "vl": vl,
        "text_only": text,
        "vl_over_text_time": round(vl["step_s"] / max(text["step_s"], 1e-9), 3),
        "vl_over_text_peak": round(vl["peak_bytes"] / text["peak_bytes"], 3) if vl["peak_bytes"] else None,
        "peak_gib": round(vl["peak_bytes"] / 2**30, 2) if vl["peak_bytes"] else None,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
