# Sourced by the GPU scripts: run_capped CAP LABEL COMMAND... runs the command under `timeout`, with
# CAP cut to what is left of the script's budget. The caller sets BUDGET (seconds), START (=$SECONDS
# at its start), LOG (a file every line is appended to) and status (set to 1 by a failed, cut or
# skipped step).
run_capped() {
  local cap=$1 label=$2; shift 2
  local left=$((BUDGET - (SECONDS - START) - 10))
  ((left < cap)) && cap=$left
  if ((cap < 25)); then echo "=== $label: SKIPPED (budget)" | tee -a "$LOG"; status=1; return; fi
  echo "=== $label (cap $cap s, $((SECONDS - START)) s used): $*" | tee -a "$LOG"
  timeout --kill-after=10 "$cap" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  local verdict="rc=$rc"
  ((rc == 124 || rc == 137)) && verdict="CUT at its $cap s cap (rc=$rc)"
  echo "=== $label: $verdict" | tee -a "$LOG"
  ((rc == 0)) || status=1
}
