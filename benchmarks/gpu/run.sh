#!/usr/bin/env bash
# The GPU check of the trainer, under 10 minutes on one H200: the *_gpu.py tests, then JSON for
#   head.json     fused vs logits statistics at 4k/8k/16k response tokens, Qwen2.5-7B lm_head (3584 x 152064)
#   rl_step.json  one RL step (policy + reference + update) of a random Qwen2.5-1.5B-config model, 4k response,
#                 bf16, gradient checkpointing: tokens/s and MFU (fused path; rl_step_logits.json: logits path)
# into $OUT (the device runner's folder) or benchmarks/results/gpu. Usage: bash benchmarks/gpu/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT_DIR=${OUT:-benchmarks/results/gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT_DIR"
export PYTHONPATH=$PWD TOKENIZERS_PARALLELISM=false
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT_DIR/gpu.txt" 2>&1 || true
timeout 180 "$PY" -m pytest -q tests/*_gpu.py -m gpu -p no:cacheprovider --junitxml="$OUT_DIR/tests_gpu.xml" \
  2>&1 | tail -n 30 | tee "$OUT_DIR/tests_gpu.txt" || status=1
timeout 180 "$PY" benchmarks/gpu/bench_gpu.py head --out "$OUT_DIR/head.json" || status=1
timeout 120 "$PY" benchmarks/gpu/bench_gpu.py rl_step --out "$OUT_DIR/rl_step.json" || status=1
timeout 90 "$PY" benchmarks/gpu/bench_gpu.py rl_step --stats-path logits --repeats 2 \
  --out "$OUT_DIR/rl_step_logits.json" || status=1
exit $status
