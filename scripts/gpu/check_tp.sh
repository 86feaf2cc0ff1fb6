#!/usr/bin/env bash
# Tensor-parallel acceptance on a machine with >= 2 GPUs (nvidia-h200-x2), one call:
#   0. symmetric-memory all-reduce against NCCL: sums and graph timings (scripts/gpu/check_all_reduce.py);
#   1. batch-1 decode on the Llama-3.1-8B shape (random weights) at TP=1 and TP=2; TP=2 must be
#      at least MIN_SPEEDUP (1.6) times faster;
#   2. TP=2 vs TP=1 greedy bf16, 32 tokens, tiny checkpoints of every architecture (+ 1 KV head);
#   3. batch-1 decode at TP=2 with NCCL only, to show what symmetric memory buys.
# Parts run in this order inside BUDGET_S (one device call); a part that does not fit is skipped.
# Usage on the device machine, from the repo root:  bash scripts/gpu/check_tp.sh
set -uo pipefail
# NVLink multicast stays off on these shared hosts (device notes): keep it off for every rank.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:$PWD/platform:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
MIN_SPEEDUP="${MIN_SPEEDUP:-1.6}"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
nvidia-smi topo -m 2>&1 | tee -a "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'GPUs', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version())" | tee -a "$OUT/gpu.txt"
status=0
BUDGET_S="${BUDGET_S:-540}"  # the device call's limit is 600 s; a part that cannot fit is skipped
fits() { [ $((SECONDS + $1)) -le "$BUDGET_S" ] || { echo "--- skipped (needs $1 s, $((BUDGET_S - SECONDS)) s left): $2"; return 1; }; }

echo "=== 0. all-reduce: symmetric memory vs NCCL, sums and graph timings"
fits 60 all-reduce && { timeout 90 python3 scripts/gpu/check_all_reduce.py 2>&1 | tee "$OUT/all_reduce.log" || status=1; }

echo "=== 1. batch-1 decode, llama-3.1-8b shape, TP=1 then TP=2"
for tp in 1 2; do
  fits 150 "decode TP=$tp" && timeout 200 python3 -m engine.bench.engine_bench --random-arch llama-3.1-8b --device cuda \
    --workload decode-bs1 --tp "$tp" --json "$OUT/decode_bs1_tp$tp.json" 2>&1 | tee "$OUT/decode_bs1_tp$tp.log" | tail -25
done
python3 - "$OUT" "$MIN_SPEEDUP" <<'PY' || status=1
import json, sys
out, need = sys.argv[1], float(sys.argv[2])
key = "engine_decode_bs1_decode_tokens_per_s"
tp1, tp2 = (json.load(open(f"{out}/decode_bs1_tp{tp}.json"))["figures"][key] for tp in (1, 2))
print(f"decode bs1 tokens/s: TP=1 {tp1:.1f}, TP=2 {tp2:.1f}, speedup {tp2 / tp1:.2f}x (need {need}x)")
sys.exit(0 if tp2 / tp1 >= need else 1)
PY

echo "=== 2. TP=2 vs TP=1 greedy, bf16, 32 tokens"
fits 150 "greedy match" && { timeout 240 python3 scripts/gpu/check_tp.py --tokens 32 --dtype bfloat16 2>&1 | tee "$OUT/tp_match.log" || status=1; }

echo "=== 3. batch-1 decode at TP=2 with NCCL for every all-reduce (the comparison for symmetric memory)"
fits 150 "decode TP=2 nccl" && CHASSIS_TP_ALL_REDUCE=nccl timeout 200 python3 -m engine.bench.engine_bench \
  --random-arch llama-3.1-8b --device cuda --workload decode-bs1 --tp 2 --json "$OUT/decode_bs1_tp2_nccl.json" \
  2>&1 | tee "$OUT/decode_bs1_tp2_nccl.log" | tail -8
echo "finished in $SECONDS s"
exit $status
