#!/usr/bin/env bash
# A real NVIDIA node end to end (issue 22): `chassis up` on embedded defaults (SQLite, filesystem
# broker) with its worker, beat, node agent and gateway; the agent registers the GPU through NVML;
# a random-weight Llama-3.1-8B-shape checkpoint (16 GB of bf16 safetensors under /tmp) is validated,
# placed and launched as a CUDA replica; one streamed chat request goes through the gateway.
# Every phase prints its time (scripts/gpu/e2e_nvidia.py says how).
#
# On the device machine, from the repo root, carrying the wheels scripts/gpu/fetch_wheels.sh fetched:
#   bash scripts/gpu/e2e_nvidia.sh                 # carry [".whl"]; about 3-5 minutes
# On a machine without a GPU (the same flow on the CPU runtime, the tiny-llama shape):
#   bash scripts/gpu/e2e_nvidia.sh --device cpu --tiny
# State, logs and the checkpoint go to $E2E_WORK_DIR (default /tmp/chassis-e2e); results and logs
# to $OUT (e2e.log, e2e.json, logs/).
set -uo pipefail
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
# The repo's venv where there is one (here), else the machine's python3 (the GPU image).
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
# The carried wheels fill in what this Python lacks (the GPU image has no Django, Celery, FastAPI).
if ls .whl/*.whl >/dev/null 2>&1 && ! "$PYTHON" -c "import django, celery, fastapi, uvicorn" 2>/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "e2e: installing .whl/ failed" >&2; exit 1; }
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:$PWD/platform:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/[e2e] nvidia-smi: /'
fi
"$PYTHON" -c "import sys, torch; print('[e2e] python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
WORK="${E2E_WORK_DIR:-/tmp/chassis-e2e}"
date -u +"[e2e] started %Y-%m-%d %H:%M:%S UTC on $(hostname)"
"$PYTHON" scripts/gpu/e2e_nvidia.py --work-dir "$WORK" --json "$OUT/e2e.json" "$@" 2>&1 | tee "$OUT/e2e.log"
status=${PIPESTATUS[0]}
# The platform's and the replica's logs come back too (not the checkpoint).
mkdir -p "$OUT/logs"
cp "$WORK"/var/log/*.log "$WORK"/var/up.log "$WORK"/var/replicas/*.log "$WORK"/models/write_checkpoint.log "$OUT/logs/" 2>/dev/null
exit "$status"
