"""benchmarks/gpu: the Python parts of run.sh work on CPU with tiny shapes (the script itself needs a GPU)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "gpu" / "bench_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_head_and_rl_step_run_on_cpu_with_tiny_shapes(tmp_path):
    bench = _bench()
    cpu = ["--tiny", "--device", "cpu", "--dtype", "float32", "--repeats", "1"]
    head = bench.main(["head", *cpu, "--out", str(tmp_path / "head.json")])
    assert [r["response_tokens"] for r in head["results"]] == [64, 128]
    assert all(r["fused_s"] > 0 and r["logits_s"] > 0 for r in head["results"])
    assert (tmp_path / "head.json").is_file()
    for path in ("fused", "logits"):
        step = bench.main(["rl_step", *cpu, "--stats-path", path])
        assert step["tokens_per_s"] > 0 and 0 < step["mfu"] < 1 and step["stats_path"] == path


def test_model_flops_of_the_1p5b_config():
    from types import SimpleNamespace

    cfg = SimpleNamespace(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                          intermediate_size=8960, vocab_size=151936)  # fmt: skip
    f = _bench().model_flops(cfg, prompt=0, response=1, rows=1)["forward"]
    n_matmul = 28 * (2 * 1536 * 1536 + 2 * 1536 * 256 + 3 * 1536 * 8960)  # 1.31e9 parameters in the layers
    assert f == 2 * n_matmul + 2 * 2 * 28 * 1536 / 2 + 2 * 1536 * 151936


def test_run_script_is_valid_bash_and_runs_every_part():
    script = ROOT / "benchmarks" / "gpu" / "run.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    for part in (
        "tests/*_gpu.py",
        "bench_gpu.py head",
        "bench_gpu.py rl_step",
        "vllm_check.py --model",
        "torch.distributed.run --nproc_per_node 1",
        "plan rl",
        "rollout.backend=vllm",
    ):
        assert part in text
    assert list((ROOT / "tests").glob("*_gpu.py"))


def test_the_sync_checks_log_prob_gap_reads_the_tokens_the_engine_sampled(tiny_model_dir):
    """vllm_check.gap on CPU with a fake engine: its own model's log-probs give a gap of 0; the same values
    one position late (an off-by-one in either side) do not."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ares_cli.generation import Completion

    spec = importlib.util.spec_from_file_location("vllm_check", ROOT / "benchmarks" / "gpu" / "vllm_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)

    class Engine:
        shift = 0

        def generate(self, requests, sampling):
            out = []
            for req in requests:
                ids = list(tokenizer(req.prompt, add_special_tokens=False)["input_ids"])
                tokens = [5, 9, 7, 11]
                with torch.no_grad():
                    logits = model(input_ids=torch.tensor([ids + tokens])).logits[0].float()
                lp = torch.log_softmax(logits, -1)
                values = [float(lp[len(ids) - 1 + i + self.shift, t]) for i, t in enumerate(tokens)]
                out.append([Completion(text="", token_ids=tokens, finish_reason="length", logprobs=values)])
            return out

    engine = Engine()
    exact = check.gap(model, tokenizer, engine, ["a b", "c"], None)
    assert exact["tokens"] == 8 and exact["max_abs"] < 1e-5
    engine.shift = 1
    assert check.gap(model, tokenizer, engine, ["a b", "c"], None)["mean_abs"] > 1e-3
