#!/usr/bin/env bash
# A prefill of 2,048 tokens from this tree and from another one, alternating in one device call.
# An eager prefill is host-bound, and the host's speed moves from call to call (docs/performance.md,
# issue 16): only a same-call comparison tells a code change from the machine.
#
# Usage, from the repo root on the device machine:
#   git archive REV engine kernels | tar -x -C _ab_REV    # here, before the call: an untracked copy travels
#   bash scripts/gpu/prefill_ab.sh _ab_REV [ROUNDS] [SHAPE]   # default 2 rounds, deepseek-v2-lite
# Prints each run's prefill_2048_tokens_per_s, labelled by tree; logs under $OUT/prefill_ab/.
set -uo pipefail
[[ ${1:-} == -h || ${1:-} == --help ]] && { sed -n '2,/^set /{/^#/p}' "$0"; exit 0; }
OTHER="${1:?usage: prefill_ab.sh OTHER_TREE [ROUNDS] [SHAPE]}" ROUNDS="${2:-2}" SHAPE="${3:-deepseek-v2-lite}"
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT/prefill_ab"
HERE="$PWD" THERE="$(cd "$OTHER" && pwd)"
for round in $(seq "$ROUNDS"); do
  for tree in "$HERE" "$THERE"; do
    label=$([[ $tree == "$HERE" ]] && echo head || basename "$tree")
    log="$OUT/prefill_ab/${label}_${round}.log"
    (cd "$tree" && PYTHONPATH="$tree:$HERE" timeout 150 python3 -m engine.bench.engine_bench --random-arch "$SHAPE" \
      --device cuda --workload prefill --prefill-lengths 2048 >"$log" 2>&1)
    echo "round $round $label: $(grep -o 'prefill_2048_tokens_per_s=[0-9,.]*' "$log" | head -1) (rc $?)"
  done
done
