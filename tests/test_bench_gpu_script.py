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
    for part in ("tests/*_gpu.py", "bench_gpu.py head", "bench_gpu.py rl_step"):
        assert part in text
    assert list((ROOT / "tests").glob("*_gpu.py"))
