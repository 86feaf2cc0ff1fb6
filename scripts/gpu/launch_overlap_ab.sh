#!/usr/bin/env bash
# Programmatic dependent launch (EngineConfig.launch_overlap) on one H200 in one call: the CUDA tests of
# every Triton kernel with it on (the default), then batch-1 decode of each shape with it on and off,
# each run its own engine process, the pairs interleaved (on, off, on, off ...) so drift hits both.
#
# Usage on the device machine, from the repo root (python3 with torch, triton and transformers):
#   bash scripts/gpu/launch_overlap_ab.sh [--budget SECONDS] [--rounds N] [--shape NAME]... [--no-tests]
# Shapes are engine.bench.random_arch names (default: deepseek-v2-lite qwen3-30b-a3b llama-3.1-8b).
# Output under $OUT: ab.log, <shape>-<mode>-<round>.json (chassis bench engine --json), summary.txt.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/platform:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
BUDGET=560 ROUNDS=1 SHAPES=() TESTS=1
while (($#)); do
  case "$1" in
    --budget) BUDGET="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --shape) SHAPES+=("$2"); shift 2 ;;
    --no-tests) TESTS=0; shift ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) echo "launch_overlap_ab.sh: unknown argument $1"; exit 2 ;;
  esac
done
((${#SHAPES[@]})) || SHAPES=(deepseek-v2-lite qwen3-30b-a3b llama-3.1-8b)
LOG="$OUT/ab.log"; : >"$LOG"
source "$(dirname "$0")/budget.sh"
start_budget
if ((TESTS)); then
  run_capped 170 kernel-tests "$PY" -m pytest -q -p no:cacheprovider -x tests/kernels tests/engine/layers/test_mla.py
fi
for ((r = 1; r <= ROUNDS; r++)); do
  for shape in "${SHAPES[@]}"; do
    for mode in auto off; do
      run_capped 75 "$shape $mode round $r" "$PY" -m engine.bench.engine_bench --random-arch "$shape" --device cuda \
        --workload decode-bs1 --launch-overlap "$mode" --json "$OUT/$shape-$mode-$r.json"
    done
  done
done
"$PY" - "$OUT" <<'PY' 2>&1 | tee "$OUT/summary.txt" | tee -a "$LOG"
import glob, json, os, sys
KEYS = ("engine_decode_bs1_decode_tokens_per_s", "engine_decode_bs1_graph_replay_ms", "fraction_decode_bs1_of_floor")
rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*-*-*.json"))):
    shape, mode, _ = os.path.basename(path)[:-5].rsplit("-", 2)
    figures = json.load(open(path)).get("figures", {})
    rows.setdefault(shape, {}).setdefault(mode, []).append([figures.get(k) for k in KEYS])
print("shape mode: " + ", ".join(KEYS) + " (one list per round)")
for shape, modes in rows.items():
    for mode, runs in sorted(modes.items()):
        print(shape, mode, [[round(v, 4) if v is not None else None for v in run] for run in runs])
PY
echo "=== done ($((SECONDS - START)) s used)" | tee -a "$LOG"
exit $status
