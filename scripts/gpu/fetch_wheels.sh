#!/usr/bin/env bash
# The wheels scripts/gpu/e2e_nvidia.sh needs on the GPU machine and its image lacks (Python 3.12,
# x86-64; the image's list is in the device notes), at requirements.lock's versions, into .whl/,
# which travels with the working tree (carry [".whl"]) and which .git/info/exclude keeps out of git.
# The control plane (Django and its apps), Celery, the gateway and `chassis serve` (FastAPI,
# uvicorn, pydantic) import these; everything else they import is in the image. Optional imports
# (psycopg for PostgreSQL, redis, brotli, orjson, ...) are left out: SQLite and the filesystem broker
# need none of them.
# Usage, here, from the repo root:  bash scripts/gpu/fetch_wheels.sh     (about 15 MiB)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PYTHON="${PYTHON:-.venv/bin/python}"
NAMES=(
  Django asgiref sqlparse djangorestframework drf-spectacular drf-spectacular-sidecar uritemplate
  inflection django-filter django-tables2 django-axes django-csp django-prometheus dj-database-url
  whitenoise
  celery kombu billiard vine amqp click-didyoumean click-plugins click-repl prompt_toolkit wcwidth tzlocal
  fastapi starlette pydantic pydantic_core annotated-types typing-inspection typing_extensions uvicorn
  sniffio opentelemetry-api click
)
pins=()
for name in "${NAMES[@]}"; do
  # requirements.lock spells names as the project does; match them as pip does (case, - _ .).
  line=$(awk -v want="$name" 'function norm(s) { s = tolower(s); gsub(/[-_.]+/, "-", s); return s }
    !/^#/ { split($0, part, "=="); if (norm(part[1]) == norm(want)) print }' requirements.lock)
  [[ -n "$line" ]] || { echo "fetch_wheels: $name is not pinned in requirements.lock" >&2; exit 1; }
  pins+=("$line")
done
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.whl/' >> .git/info/exclude; }
rm -rf .whl && mkdir .whl
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${pins[@]}" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
count=$(ls .whl/*.whl | wc -l)
[[ "$count" == "${#NAMES[@]}" ]] || { echo "fetch_wheels: $count wheels for ${#NAMES[@]} names" >&2; exit 1; }
echo "fetch_wheels: $count wheels, $(du -sh .whl | cut -f1) in .whl/"
