#!/usr/bin/env bash
# The GPU acceptance items of issues 18, 19, 20, 21 and 22 on one H200, in at most two device calls
# (docs/performance.md records the figures):
#   e2e         issue 22 item 5: scripts/gpu/e2e_nvidia.sh (control plane, worker, agent, CUDA replica, streamed answer)
#   kv-tiers    issue 21 item 3: chassis bench kv-tiers (8k-token TTFT from host / disk vs recompute, bandwidths)
#   structured  issue 19 item 4: chassis bench structured (batch-64 step overhead, schema compile TTFT)
#   spec-llama, spec-deepseek   issue 18 item 4: chassis bench speculative --grid (oracle drafts of known acceptance)
#   cpu-smollm2 issue 15: the CPU engine vs transformers on SmolLM2-135M's shape (random weights: the GGUF
#               does not travel), pinned to 2 of the host's cores (taskset), on an otherwise idle machine
#   kv-trace    issue 21 item 1: chassis bench kv-trace on 4 CPU replicas of SmolLM2-135M's shape (random weights,
#               SmolLM2's real tokenizer and chat template from .gpucarry: the GGUF does not travel), on the
#               host's 16 cores; KV_TRACE_ARGS (default "--requests 20000") is passed on
#   cuda-graphs issue 21: tests/engine/runner/test_cuda_graphs.py on the GPU (prompt tails through decode graphs)
#   batch-invariance issue 20 item 1: scripts/gpu/batch_invariance.py (256 prompts alone / in 8s / at once,
#               chunks 64 and 2048, with and without prefix hits, bitwise; then its cost vs normal mode)
#
# Usage on the device machine, from the repo root, carry [".whl", ".gpucarry"]:
#   bash scripts/gpu/run_open_items.sh [--budget SECONDS] STEP...
# .whl holds scripts/gpu/fetch_wheels.sh's wheels (Django, Celery, FastAPI...); .gpucarry/whl the
# benchmarks' (xgrammar, jsonschema) and .gpucarry/smollm2-tokenizer SmolLM2's tokenizer saved as a
# directory (the structured bench needs a real tokenizer; the 98 MB GGUF does not travel). Here:
#   bash scripts/gpu/fetch_wheels.sh && bash scripts/gpu/fetch_bench_carry.sh
# Every step runs under `timeout`: its own cap, never past the budget (default 580 s). Output: $OUT/open_items.log
# (everything) and $OUT/results.tgz (each step's log and JSON, the e2e platform logs): the device
# tool brings back at most 8 files, so the steps write under a work folder that is packed at the end.
set -uo pipefail
FINAL_OUT="${OUT:-/tmp/out}"; mkdir -p "$FINAL_OUT"
export OUT=/tmp/open-items-results; rm -rf "$OUT"; mkdir -p "$OUT"
BUDGET=580
STEPS=()
while (($#)); do
  case "$1" in
    --budget) BUDGET="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    *) STEPS+=("$1"); shift ;;
  esac
done
LOG="$FINAL_OUT/open_items.log"; : >"$LOG"
START=$SECONDS
for dir in .whl .gpucarry/whl; do
  if ls "$dir"/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$dir"/*.whl
  fi
done
export PYTHONPATH="/tmp/site:$PWD:$PWD/platform:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$LOG"
git log -1 --format='commit %H %cd' 2>/dev/null | tee -a "$LOG"
status=0

run_step() {
  local name=$1 cap=$2; shift 2
  local left=$((BUDGET - (SECONDS - START) - 10))
  ((left < cap)) && cap=$left
  if ((cap < 30)); then
    echo "=== $name: SKIPPED, $((BUDGET - (SECONDS - START))) s left of the ${BUDGET} s budget" | tee -a "$LOG"
    status=1; return
  fi
  echo "=== $name (cap ${cap} s): $*" | tee -a "$LOG"
  local begin=$SECONDS
  timeout --kill-after=5 "$cap" "$@" 2>&1 | tee -a "$LOG" "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: rc=$rc in $((SECONDS - begin)) s" | tee -a "$LOG"
  ((rc == 0)) || status=1
}

for step in "${STEPS[@]}"; do
  case "$step" in
    e2e) run_step e2e 330 bash scripts/gpu/e2e_nvidia.sh --budget 315 ;;
    kv-tiers) mkdir -p /tmp/kv-disk
      run_step kv-tiers 230 python3 -m engine.bench.kv_tiers --device cuda --kv-disk-cache-dir /tmp/kv-disk \
        --json "$OUT/kv_tiers.json" ;;
    structured) run_step structured 150 python3 -m chassis bench structured --device cuda \
        --tokenizer .gpucarry/smollm2-tokenizer --json "$OUT/structured.json" ;;
    spec-llama) run_step spec-llama 200 python3 -m engine.bench.speculative --grid --random-arch llama-3.1-8b \
        --device cuda --acceptance 0.2 0.5 0.8 0.9 --batch-sizes 1 16 64 128 256 --draft-lengths 1 2 3 4 5 \
        --max-tokens 64 --time-budget 185 --json "$OUT/spec_grid_llama.json" ;;
    spec-deepseek) run_step spec-deepseek 230 python3 -m engine.bench.speculative --grid \
        --random-arch deepseek-v2-lite --device cuda --acceptance 0.2 0.5 0.8 0.9 --batch-sizes 1 16 64 128 256 \
        --draft-lengths 1 2 3 4 5 --max-tokens 64 --time-budget 215 --json "$OUT/spec_grid_deepseek.json" ;;
    cpu-smollm2) run_step cpu-smollm2 240 taskset -c 0,1 python3 -m chassis bench engine --random-arch smollm2-135m \
        --device cpu --dtype float32 --workload static-batch --compare hf --static-batch-sizes 1,16 \
        --static-prompt-len 32 --static-output-len 64 --json "$OUT/cpu_smollm2.json" ;;
    kv-trace) python3 scripts/gpu/smollm2_random_checkpoint.py /tmp/smollm2-random .gpucarry/smollm2-tokenizer
      run_step kv-trace 560 python3 -m chassis bench kv-trace --model /tmp/smollm2-random \
        --workdir /tmp/kv-trace ${KV_TRACE_ARGS:---requests 20000} --json "$OUT/kv_trace.json" ;;
    cuda-graphs) run_step cuda-graphs 120 python3 -m pytest -q -p no:cacheprovider tests/engine/runner/test_cuda_graphs.py ;;
    batch-invariance) run_step batch-invariance 235 python3 scripts/gpu/batch_invariance.py --device cuda \
        --time-budget 215 --sweep --json "$OUT/batch_invariance.json" ;;
    *) echo "run_open_items.sh: unknown step $step" | tee -a "$LOG"; status=2 ;;
  esac
done
echo "=== done in $((SECONDS - START)) s, status $status" | tee -a "$LOG"
tar -czf "$FINAL_OUT/results.tgz" -C "$OUT" . 2>&1 | tee -a "$LOG"
exit $status
