#!/usr/bin/env bash
# Side-by-side engine figures of two revisions in one device call, so machine-to-machine spread
# (about 1.5 % on the H200) cannot pass for a regression or hide one.
#   here:   bash scripts/gpu/compare_revisions.sh --prepare REV     (exports REV's tree to .base/)
#   device: bash scripts/gpu/compare_revisions.sh [ORDER] [bench args...]   (run with carry [".base"])
# ORDER is "base,head" (default) or "head,base"; each revision runs the same engine_bench command in
# its own process from its own tree, JSON to $OUT/<rev>-<n>.json, log beside it.
set -uo pipefail
if [ "${1:-}" = "--prepare" ]; then
  rev="${2:?usage: --prepare REV}"
  rm -rf .base && mkdir .base && git archive "$rev" | tar -x -C .base
  git rev-parse "$rev" > .base/REVISION
  grep -qx '/.base/' .git/info/exclude 2>/dev/null || echo '/.base/' >> .git/info/exclude
  echo "exported $(cat .base/REVISION) to .base/"
  exit 0
fi
ORDER="${1:-base,head}"; shift || true
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
[ -d .base ] || { echo "no .base/: run --prepare REV here and carry .base" >&2; exit 2; }
BENCH=(python3 -m engine.bench.engine_bench --random-arch llama-3.1-8b --device cuda
       --workload decode-bs1 --workload offline "$@")
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/gpu.txt"
echo "base $(cat .base/REVISION)" | tee -a "$OUT/gpu.txt"
status=0; n=0
for which in ${ORDER//,/ }; do
  n=$((n + 1))
  if [ "$which" = base ]; then dir="$PWD/.base"; else dir="$PWD"; fi
  echo "=== $which ($dir)"
  (cd "$dir" && PYTHONPATH="$dir:$dir/platform" PYTHONUNBUFFERED=1 \
    "${BENCH[@]}" --json "$OUT/$which-$n.json" 2>&1 | tee "$OUT/$which-$n.log") || status=1
done
exit $status
