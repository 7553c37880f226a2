#!/usr/bin/env bash
# The GPU check of the trainer, under 10 minutes on one H200: the *_gpu.py tests, then JSON for
#   head.json     fused vs logits statistics at 4k/8k/16k response tokens, Qwen2.5-7B lm_head (3584 x 152064)
#   rl_step.json  one RL step (policy + reference + update) of a random Qwen2.5-1.5B-config model, 4k response,
#                 bf16, gradient checkpointing: tokens/s and MFU (fused path; rl_step_logits.json: logits path)
#   vllm_sync.json     (vllm installed) the in-process engine's sleep/wake free-memory figures, and its
#                      log-probs against the trainer's before and after a weight sync (benchmarks/gpu/vllm_check.py)
#   vllm_rl_step.json  one `ares rl` step under torchrun (1 GPU) with DeepSpeed ZeRO-2 and the vllm backend on
#                      the Qwen2.5-0.5B shape twin: exit code, peak GPU memory used (nvidia-smi, every 0.5 s)
#                      beside `ares plan rl`'s estimate for the same run
# into $OUT (the device runner's folder) or benchmarks/results/gpu. Usage: bash benchmarks/gpu/run.sh
# Not part of `make test` (it needs a GPU); tests/test_bench_gpu_script.py runs the Python parts on CPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT_DIR=${OUT:-benchmarks/results/gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT_DIR"
export PYTHONPATH=$PWD TOKENIZERS_PARALLELISM=false
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT_DIR/gpu.txt" 2>&1 || true
timeout 120 "$PY" -m pytest -q tests/*_gpu.py -m gpu -p no:cacheprovider --junitxml="$OUT_DIR/tests_gpu.xml" \
  2>&1 | tail -n 30 | tee "$OUT_DIR/tests_gpu.txt" || status=1
timeout 120 "$PY" benchmarks/gpu/bench_gpu.py head --out "$OUT_DIR/head.json" || status=1
timeout 90 "$PY" benchmarks/gpu/bench_gpu.py rl_step --out "$OUT_DIR/rl_step.json" || status=1
timeout 60 "$PY" benchmarks/gpu/bench_gpu.py rl_step --stats-path logits --repeats 2 \
  --out "$OUT_DIR/rl_step_logits.json" || status=1

if ! "$PY" -c "import vllm, deepspeed" 2>"$OUT_DIR/vllm_import.txt"; then
  echo '{"skipped": "vllm or deepspeed does not import (vllm_import.txt)"}' >"$OUT_DIR/vllm_sync.json"
  exit 1
fi
WORK=$(mktemp -d)
ARES=("$PY" -c "from ares_cli.main import main; main()")
TWIN=$("${ARES[@]}" --artifacts-root "$WORK/art" --json toy twin qwen2.5-0.5b | "$PY" -c "import json,sys; print(json.load(sys.stdin)['path'])")
export VLLM_ENABLE_V1_MULTIPROCESSING=0
timeout 150 "$PY" benchmarks/gpu/vllm_check.py --model "$TWIN" --out "$OUT_DIR/vllm_sync.json" \
  >"$OUT_DIR/vllm_sync.log" 2>&1 || status=1
RL_ARGS=(--model "$TWIN" --data toy-train --algo grpo --deepspeed pipelines/deepspeed/zero2.json --set steps=1
  --set rollout.backend=vllm --set rollout.prompts_per_step=8 --set rollout.group_size=4
  --set rollout.max_new_tokens=256 --set optim.mini_batch_size=8 --set optim.micro_batch_size=4
  --set rollout.vllm_gpu_memory_utilization=0.3 --set save_every=0 --set val.every=0)
( while sleep 0.5; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; done ) >"$WORK/used.txt" &
SAMPLER=$!
timeout 180 "$PY" -m torch.distributed.run --nproc_per_node 1 -m ares_cli.main --artifacts-root "$WORK/art" \
  rl "${RL_ARGS[@]}" >"$OUT_DIR/vllm_rl_step.log" 2>&1
rl_rc=$?
kill "$SAMPLER"
"${ARES[@]}" --artifacts-root "$WORK/art" --json plan rl "${RL_ARGS[@]}" --gpus 1 >"$WORK/plan.json" 2>/dev/null
"$PY" - "$rl_rc" "$WORK/used.txt" "$WORK/plan.json" >"$OUT_DIR/vllm_rl_step.json" <<'PYEOF' || status=1
import json, sys
rc, used, plan = int(sys.argv[1]), open(sys.argv[2]).read().split(), json.load(open(sys.argv[3]))
est = plan.get("estimate") or {}
print(json.dumps({"rl_exit_code": rc, "peak_used_mib": max(map(int, used), default=None),
                  "plan_exit_code": plan.get("exit_code"), "plan_trainer_need_gib": est.get("need_gib"),
                  "plan_budget_gib": est.get("budget_gib"), "plan_peak_phase": (est.get("notes") or [""])[0]}, indent=2))
sys.exit(rc)
PYEOF
exit $status
