# Sourced by the GPU scripts. The caller sets BUDGET (seconds), LOG (a file every line is appended to)
# and PY (the python), then calls start_budget; run_capped CAP LABEL COMMAND... then runs the command
# under `timeout`, with CAP cut to what is left of the budget, and sets status to 1 for a failed, cut
# or skipped step.

start_budget() {  # the clock, the status, and the machine in the log
  START=$SECONDS
  status=0
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG"
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" 2>&1 | tee -a "$LOG"
}

run_capped() {  # RESERVE (default 10 s): what the caller keeps back for its own end (a summary)
  local cap=$1 label=$2; shift 2
  local left=$((BUDGET - (SECONDS - START) - ${RESERVE:-10}))
  ((left < cap)) && cap=$left
  if ((cap < 25)); then
    echo "=== $label: SKIPPED, $((BUDGET - (SECONDS - START))) s left of the $BUDGET s budget" | tee -a "$LOG"
    status=1
    return 0
  fi
  echo "=== $label (cap $cap s, $((SECONDS - START)) s used): $*" | tee -a "$LOG"
  local t0=$SECONDS
  timeout --kill-after=10 "$cap" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  local verdict="rc=$rc"
  ((rc == 124 || rc == 137)) && verdict="CUT at its $cap s cap (rc=$rc)"
  echo "=== $label: $verdict after $((SECONDS - t0)) s" | tee -a "$LOG"
  ((rc == 0)) || status=1
}
