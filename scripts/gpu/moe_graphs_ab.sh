#!/usr/bin/env bash
# The MoE block graphs (EngineConfig.moe_graphs, engine/runner/moe_graphs.py) on one H200 in one call:
# their CUDA tests, the MLA split floor's timing (tune_mla_decode.py) and DeepSeek-V2-Lite's batch-1
# decode at each --floors value (EngineConfig.mla_split_floor), then its prefill and batch-128 workloads
# with the graphs on (auto) and off, each its own engine process, interleaved so drift hits both; then,
# in what budget is left, the offline 2,000-request mix with them on.
#
# Usage on the device machine, from the repo root (python3 with torch, triton and transformers):
#   bash scripts/gpu/moe_graphs_ab.sh [--budget SECONDS] [--rounds N] [--floors "0 256"] [--no-tests] [--no-tune]
#     [--no-offline]
# Output under $OUT: moe_graphs.log, decode-floor<N>.json, dsv2-<mode>-<round>.json, offline-auto.json,
# summary.txt.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/platform:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
BUDGET=560 ROUNDS=1 TESTS=1 TUNE=1 OFFLINE=1 FLOORS="0 256"
while (($#)); do
  case "$1" in
    --budget) BUDGET="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --floors) FLOORS="$2"; shift 2 ;;
    --no-tests) TESTS=0; shift ;;
    --no-tune) TUNE=0; shift ;;
    --no-offline) OFFLINE=0; shift ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "moe_graphs_ab.sh: unknown argument $1"; exit 2 ;;
  esac
done
LOG="$OUT/moe_graphs.log"; : >"$LOG"
source "$(dirname "$0")/budget.sh"
start_budget
if ((TESTS)); then
  run_capped 150 tests "$PY" -m pytest -q -p no:cacheprovider tests/engine/runner/test_moe_graphs_cuda.py \
    tests/kernels/test_moe_routing.py tests/engine/runner/test_moe_graphs.py tests/kernels/test_mla_decode.py
fi
if ((TUNE)); then
  run_capped 90 tune-mla-split-floor "$PY" scripts/gpu/tune_mla_decode.py --case 1:1280 --case 1:4096 --table-tokens 163840
fi
for floor in $FLOORS; do
  run_capped 90 "deepseek-v2-lite decode-bs1, mla split floor $floor" "$PY" -m engine.bench.engine_bench \
    --random-arch deepseek-v2-lite --device cuda --workload decode-bs1 --mla-split-floor "$floor" \
    --json "$OUT/decode-floor$floor.json"
done
for ((r = 1; r <= ROUNDS; r++)); do
  for mode in auto off; do
    run_capped 120 "deepseek-v2-lite moe-graphs $mode round $r" "$PY" -m engine.bench.engine_bench \
      --random-arch deepseek-v2-lite --device cuda --workload prefill --prefill-lengths 2048 --workload batch128 \
      --moe-graphs "$mode" --json "$OUT/dsv2-$mode-$r.json"
  done
done
if ((OFFLINE)); then
  run_capped 300 "deepseek-v2-lite offline, moe-graphs auto" "$PY" -m engine.bench.engine_bench --random-arch deepseek-v2-lite \
    --device cuda --workload offline --offline-requests 2000 --json "$OUT/offline-auto.json"
fi
"$PY" - "$OUT" <<'PY' 2>&1 | tee "$OUT/summary.txt" | tee -a "$LOG"
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    figures = json.load(open(path)).get("figures", {})
    keep = {k: v for k, v in figures.items() if any(w in k for w in ("prefill", "batch128", "offline", "floor", "bs1"))}
    print(os.path.basename(path), json.dumps(keep, sort_keys=True))
PY
echo "=== done ($((SECONDS - START)) s used)" | tee -a "$LOG"
exit $status
