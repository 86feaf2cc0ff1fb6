#!/usr/bin/env bash
# Everything the GPU machine checks and measures, in one call (see docs/performance.md):
#   kernel tests on CUDA + kernel timings, engine vs transformers greedy bf16, the engine benchmark.
# Usage on the device machine, from the repo root:  bash scripts/gpu/run_all.sh [bench args...]
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:$PWD/platform:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
{ nproc; lscpu | grep -E "Model name|MHz|NUMA node|Thread"; } | tee -a "$OUT/gpu.txt"
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
# GPU clocks and power every 200 ms: slow runs show whether the SM clock was low (DVFS) or the host was.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv -lms 200 \
  > "$OUT/clocks.csv" 2>/dev/null &
CLOCKS_PID=$!
trap 'kill $CLOCKS_PID 2>/dev/null' EXIT
STEPS="${STEPS:-kernels engine bench}"
status=0
if [[ " $STEPS " == *" kernels "* ]]; then
  echo "=== kernels: tests on CUDA + timings"
  python3 scripts/gpu/check_kernels.py 2>&1 | tee "$OUT/kernels.log" || status=1
fi
if [[ " $STEPS " == *" engine "* ]]; then
  echo "=== engine vs transformers (greedy, bf16, 32 tokens)"
  python3 scripts/gpu/check_engine_vs_hf.py --tokens 32 --dtype bfloat16 2>&1 | tee "$OUT/engine_vs_hf.log" || status=1
fi
if [[ " $STEPS " == *" bench "* ]]; then
  echo "=== chassis bench engine"
  python3 -m engine.bench.engine_bench --random-arch llama-3.1-8b --device cuda --compare hf \
    --json "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log" || status=1
fi
exit $status
