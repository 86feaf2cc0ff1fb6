#!/usr/bin/env bash
# Tensor-parallel acceptance on a machine with >= 2 GPUs (nvidia-h200-x2), one call:
#   1. TP=2 vs TP=1 greedy bf16, 32 tokens, tiny checkpoints of every architecture (+ 1 KV head);
#   2. batch-1 decode on the Llama-3.1-8B shape (random weights) at TP=1 and TP=2; TP=2 must be
#      at least MIN_SPEEDUP (1.6) times faster;
#   3. the CPU tensor-parallel tests (gloo), for completeness.
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

echo "=== 1. TP=2 vs TP=1 greedy, bf16, 32 tokens"
python3 scripts/gpu/check_tp.py --tokens 32 --dtype bfloat16 2>&1 | tee "$OUT/tp_match.log" || status=1

echo "=== 2. batch-1 decode, llama-3.1-8b shape, TP=1 then TP=2"
for tp in 1 2; do
  python3 -m engine.bench.engine_bench --random-arch llama-3.1-8b --device cuda --workload decode-bs1 \
    --tp "$tp" --json "$OUT/decode_bs1_tp$tp.json" 2>&1 | tee "$OUT/decode_bs1_tp$tp.log" || status=1
done
python3 - "$OUT" "$MIN_SPEEDUP" <<'PY' || status=1
import json, sys
out, need = sys.argv[1], float(sys.argv[2])
key = "engine_decode_bs1_decode_tokens_per_s"
tp1, tp2 = (json.load(open(f"{out}/decode_bs1_tp{tp}.json"))["figures"][key] for tp in (1, 2))
print(f"decode bs1 tokens/s: TP=1 {tp1:.1f}, TP=2 {tp2:.1f}, speedup {tp2 / tp1:.2f}x (need {need}x)")
sys.exit(0 if tp2 / tp1 >= need else 1)
PY

if [ -z "${SKIP_CPU_TESTS:-}" ]; then
  echo "=== 3. CPU tensor-parallel tests (gloo)"
  python3 -m pytest tests/engine/distributed -q -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/tp_cpu_tests.log" || status=1
fi
exit $status
