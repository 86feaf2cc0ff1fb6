#!/usr/bin/env bash
# Issue 16 on one H200 in one call (docs/performance.md): the fused-MoE and MLA-decode kernel tests
# on CUDA, the tiny MoE/MLA checkpoints against transformers (greedy, bf16), then the benchmark of
# DeepSeek-V2-Lite and Qwen3-30B-A3B (random bf16 weights) with transformers in the same process, and
# the offline 2,000-request mix on DeepSeek-V2-Lite; a summary table at the end.
#
# Usage on the device machine, from the repo root (python3 with torch, triton and transformers; no venv):
#   bash scripts/gpu/run_moe.sh [--only STEP]... [--budget SECONDS] [--tiny] [--device cuda|cpu] [--cap-scale K]
#                               [--offline-requests N] [--admission-batch K] [-- extra chassis-bench-engine args]
# STEPs, in order: kernels engine-vs-hf deepseek-v2-lite qwen3-30b-a3b deepseek-v2-lite-offline; and, only when
# named by --only: deepseek-v2-lite-offline-gathered (the offline mix with --admission-batch K, default 8:
# EngineConfig.admission_batch), tune-moe (scripts/gpu/tune_moe.py: $OUT/fused_moe_table.json, the fused-MoE tiles at both
# models' shapes), profile-deepseek-v2-lite and profile-qwen3-30b-a3b (scripts/gpu/profile_steps.py --eager:
# kernels per decode step at batch 1 and 128, context 576; DeepSeek's prefill of 2,048 tokens too; with the
# fused-MoE tiles of $OUT/fused_moe_table.json when tune-moe wrote it). Issue 16:
#   bash scripts/gpu/run_moe.sh --budget 540 --only tune-moe --only profile-deepseek-v2-lite --only profile-qwen3-30b-a3b
# Batch-1 decode only (session 22): tune-moe-small (the small-batch tiles at 1-8 tokens for both shapes and
# DeepSeek's fused shared experts, over a copy of kernels/fused_moe_table.json, then installed there so the
# steps after it use them), decode-deepseek-v2-lite (decode bs 1 and prefill 2,048, shared experts fused: the
# CUDA default), decode-deepseek-v2-lite-separate (the same with --shared-experts separate), decode-qwen3-30b-a3b:
#   bash scripts/gpu/run_moe.sh --budget 560 --only kernels --only tune-moe-small --only decode-deepseek-v2-lite \
#     --only decode-deepseek-v2-lite-separate --only decode-qwen3-30b-a3b --only profile-deepseek-v2-lite
# Every step runs under `timeout`: its own cap, and never past the whole call's budget (default 560 s,
# for a 600 s device call), so a slow step costs only itself; a skipped or cut step says so.
# --tiny benches the CPU twins (tiny-deepseek-v2, tiny-qwen3-moe) under the same step names;
# --cap-scale K multiplies every step's cap (a CPU run is slower than the caps are sized for).
# Output under $OUT: run_moe.log (everything), <step>.json per bench step, summary.txt, clocks.csv.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/platform:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
ALL_STEPS=(kernels engine-vs-hf deepseek-v2-lite qwen3-30b-a3b deepseek-v2-lite-offline)
ON_REQUEST_STEPS=(deepseek-v2-lite-offline-gathered tune-moe profile-deepseek-v2-lite profile-qwen3-30b-a3b
  tune-moe-small decode-deepseek-v2-lite decode-deepseek-v2-lite-separate decode-qwen3-30b-a3b)
ONLY=() BUDGET=560 DEVICE=cuda TINY=0 OFFLINE_REQUESTS=2000 ADMISSION_BATCH=8 CAP_SCALE=1 EXTRA=()
while (($#)); do
  case "$1" in
    --only) ONLY+=("$2"); shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --tiny) TINY=1; shift ;;
    --cap-scale) CAP_SCALE="$2"; shift 2 ;;
    --offline-requests) OFFLINE_REQUESTS="$2"; shift 2 ;;
    --admission-batch) ADMISSION_BATCH="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "run_moe.sh: unknown argument $1 (steps: ${ALL_STEPS[*]})"; exit 2 ;;
  esac
done
for step in "${ONLY[@]}"; do
  [[ " ${ALL_STEPS[*]} ${ON_REQUEST_STEPS[*]} " == *" $step "* ]] ||
    { echo "run_moe.sh: unknown step $step (steps: ${ALL_STEPS[*]} ${ON_REQUEST_STEPS[*]})"; exit 2; }
done
LOG="$OUT/run_moe.log"; : >"$LOG"
START=$SECONDS
status=0

wanted() {
  [[ " ${ONLY[*]} " == *" $1 "* ]] && return 0
  ((${#ONLY[@]} == 0)) && [[ " ${ALL_STEPS[*]} " == *" $1 "* ]]
}

source "$(dirname "$0")/budget.sh"
RESERVE=20  # timeout's kill grace and the summary

# run_step NAME CAP_SECONDS COMMAND...: a wanted step under timeout, capped by what is left of the budget.
run_step() {
  local name=$1 cap=$(($2 * CAP_SCALE)); shift 2
  wanted "$name" || return 0
  run_capped "$cap" "$name" "$@"
}

if [[ $DEVICE == cuda ]]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv -lms 500 \
    >"$OUT/clocks.csv" 2>/dev/null &
  CLOCKS_PID=$!
  trap 'kill $CLOCKS_PID 2>/dev/null' EXIT
fi
"$PY" -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" 2>&1 | tee -a "$LOG"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" | tee -a "$LOG"

DSV2=deepseek-v2-lite QWEN=qwen3-30b-a3b
((TINY)) && DSV2=tiny-deepseek-v2 QWEN=tiny-qwen3-moe
# The issue's anchors: bs=1 decode, bs=32 (prompt 512, 128 out) and prefill 2,048 (engine and transformers);
# batch 128 for its decode step against the weight-and-KV floor (transformers' batch 128 left out: time).
SHAPE_ARGS=(--device "$DEVICE" --compare hf --workload decode-bs1 --workload prefill --workload batch128
  --workload static-batch --prefill-lengths 2048 --static-batch-sizes 32 --static-prompt-len 512
  --static-output-len 128 --no-hf-batch128)

run_step kernels 120 "$PY" -m pytest -q -p no:cacheprovider tests/kernels/test_fused_moe.py tests/kernels/test_mla_decode.py \
  tests/kernels/test_moe_routing.py tests/kernels/test_moe_align.py tests/kernels/test_varlen_attention.py \
  tests/engine/layers/test_mla.py
run_step engine-vs-hf 100 "$PY" scripts/gpu/check_engine_vs_hf.py --arch qwen3_moe --arch deepseek_v2 \
  --arch deepseek_v3 --tokens 32 --dtype bfloat16 --train-steps 100 --prompts 4 --kernels triton --device "$DEVICE"
run_step deepseek-v2-lite 190 "$PY" -m engine.bench.engine_bench --random-arch "$DSV2" "${SHAPE_ARGS[@]}" \
  --json "$OUT/deepseek-v2-lite.json" "${EXTRA[@]}"
run_step qwen3-30b-a3b 190 "$PY" -m engine.bench.engine_bench --random-arch "$QWEN" "${SHAPE_ARGS[@]}" \
  --json "$OUT/qwen3-30b-a3b.json" "${EXTRA[@]}"
run_step deepseek-v2-lite-offline 300 "$PY" -m engine.bench.engine_bench --random-arch "$DSV2" --device "$DEVICE" \
  --workload offline --offline-requests "$OFFLINE_REQUESTS" --json "$OUT/deepseek-v2-lite-offline.json" "${EXTRA[@]}"
run_step deepseek-v2-lite-offline-gathered 300 "$PY" -m engine.bench.engine_bench --random-arch "$DSV2" --device "$DEVICE" \
  --workload offline --offline-requests "$OFFLINE_REQUESTS" --admission-batch "$ADMISSION_BATCH" \
  --json "$OUT/deepseek-v2-lite-offline-gathered.json" "${EXTRA[@]}"

if wanted tune-moe-small; then
  cp kernels/fused_moe_table.json "$OUT/fused_moe_table.json"
  SMALL_ARGS=(--buckets 1 2 4 8 --model deepseek-v2-lite --model deepseek-v2-lite-fused-shared --model qwen3-30b-a3b)
  ((TINY)) && SMALL_ARGS=(--tiny --buckets 1 2 --calls 2 --replays 1)
  run_step tune-moe-small 200 "$PY" scripts/gpu/tune_moe.py --device "$DEVICE" --budget $((150 * CAP_SCALE)) \
    "${SMALL_ARGS[@]}" --write-table "$OUT/fused_moe_table.json"
  # Installed only from a GPU (a CPU run's table is keyed by another device name and would replace the H200's).
  [[ $DEVICE == cuda ]] && cp "$OUT/fused_moe_table.json" kernels/fused_moe_table.json
fi
DECODE_ARGS=(--device "$DEVICE" --workload decode-bs1)
run_step decode-deepseek-v2-lite 120 "$PY" -m engine.bench.engine_bench --random-arch "$DSV2" "${DECODE_ARGS[@]}" \
  --workload prefill --prefill-lengths 2048 --json "$OUT/decode-deepseek-v2-lite.json" "${EXTRA[@]}"
run_step decode-deepseek-v2-lite-separate 120 "$PY" -m engine.bench.engine_bench --random-arch "$DSV2" \
  "${DECODE_ARGS[@]}" --workload prefill --prefill-lengths 2048 --shared-experts separate \
  --json "$OUT/decode-deepseek-v2-lite-separate.json" "${EXTRA[@]}"
run_step decode-qwen3-30b-a3b 120 "$PY" -m engine.bench.engine_bench --random-arch "$QWEN" "${DECODE_ARGS[@]}" \
  --json "$OUT/decode-qwen3-30b-a3b.json" "${EXTRA[@]}"

TUNE_ARGS=() PROFILE_ARGS=(--decode-steps 8 --moe-table "$OUT/fused_moe_table.json")  # the table, if tune-moe ran
((TINY)) && TUNE_ARGS=(--tiny --buckets 1 16 --calls 2 --replays 1) PROFILE_ARGS+=(--decode-steps 2 --layers 1)
run_step tune-moe 240 "$PY" scripts/gpu/tune_moe.py --device "$DEVICE" --budget $((190 * CAP_SCALE)) "${TUNE_ARGS[@]}" \
  --write-table "$OUT/fused_moe_table.json"
run_step profile-deepseek-v2-lite 150 "$PY" scripts/gpu/profile_steps.py --eager --device "$DEVICE" --arch "$DSV2" \
  --case 1:576 --case 128:576 --prefill 2048 "${PROFILE_ARGS[@]}"
run_step profile-qwen3-30b-a3b 130 "$PY" scripts/gpu/profile_steps.py --eager --device "$DEVICE" --arch "$QWEN" \
  --case 1:576 --case 128:576 "${PROFILE_ARGS[@]}"

bench_wanted=0
for step in "${ALL_STEPS[@]}"; do wanted "$step" && bench_wanted=1; done
if ((bench_wanted)); then
  echo "=== summary ($((SECONDS - START)) s used)" | tee -a "$LOG"
  "$PY" scripts/gpu/summarize_moe.py "$OUT/deepseek-v2-lite.json" "$OUT/qwen3-30b-a3b.json" \
    "$OUT/deepseek-v2-lite-offline.json" "$OUT/deepseek-v2-lite-offline-gathered.json" 2>&1 | tee "$OUT/summary.txt" | tee -a "$LOG"
fi
echo "=== done ($((SECONDS - START)) s used)" | tee -a "$LOG"
exit $status
