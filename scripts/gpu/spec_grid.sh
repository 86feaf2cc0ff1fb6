#!/usr/bin/env bash
# Issue 18 item 4 on one H200 in one call: the Llama-3.1-8B grid (oracle drafts of known acceptance)
# with the batch sizes as concurrencies (--waves), every step traced, and the point that failed the
# batch >= 128 goal in session 23 (acceptance 0.9, batch 128) profiled: its off, best fixed and
# scheduler modes rerun under torch.profiler with the engine's phases marked (grid_profile.py), so the
# log says how much of a verify step the device spent waiting for the host. Then grid_trace.py sums
# the trace up per mode (plain and verify steps against the policy's predictions, the drain).
#
# Usage on the device machine, from the repo root (python3 with torch and triton):
#   bash scripts/gpu/spec_grid.sh [--budget SECONDS] [--waves W] [--arch NAME] [--profile ACC:BATCH]...
#       [--acceptance "0.8 0.9"] (a subset of the rates, to split the grid over calls) [--min-seconds S]
# Output under $OUT: spec_grid.log, grid.json, profiles/*.json.gz, grid_trace.txt.
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/platform:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
BUDGET=560 WAVES=3 ARCH=llama-3.1-8b PROFILES=() ACCEPTANCE="0.8 0.2 0.5 0.9" MIN_SECONDS=3
while (($#)); do
  case "$1" in
    --budget) BUDGET="$2"; shift 2 ;;
    --waves) WAVES="$2"; shift 2 ;;
    --arch) ARCH="$2"; shift 2 ;;
    --acceptance) ACCEPTANCE="$2"; shift 2 ;;
    --min-seconds) MIN_SECONDS="$2"; shift 2 ;;
    --profile) PROFILES+=(--profile-point "$2"); shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "spec_grid.sh: unknown argument $1"; exit 2 ;;
  esac
done
((${#PROFILES[@]})) || PROFILES=(--profile-point 0.9:128)
LOG="$OUT/spec_grid.log"; : >"$LOG"
source "$(dirname "$0")/budget.sh"
start_budget
RESERVE=25
# The grid's own budget leaves room for the profiles (three untimed runs of one point, ~10 s) and the summary.
GRID_BUDGET=$((BUDGET - 60))
run_capped "$((BUDGET - 20))" grid "$PY" -m engine.bench.speculative --grid --random-arch "$ARCH" --device cuda \
  --acceptance $ACCEPTANCE --batch-sizes 1 16 64 128 256 --draft-lengths 1 2 3 4 5 --max-tokens 64 \
  --rounds 2 --min-seconds "$MIN_SECONDS" --waves "$WAVES" --trace-steps "${PROFILES[@]}" --profile-dir "$OUT/profiles" \
  --time-budget "$GRID_BUDGET" --json "$OUT/grid.json"
if [[ -f "$OUT/grid.json" ]]; then
  "$PY" -m engine.bench.grid_trace "$OUT/grid.json" 2>&1 | tee "$OUT/grid_trace.txt" | tee -a "$LOG"
fi
exit "$status"
