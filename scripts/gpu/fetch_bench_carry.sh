#!/usr/bin/env bash
# What the GPU benchmarks of scripts/gpu/run_open_items.sh need beside the image and .whl, into
# .gpucarry/ (kept out of git by .git/info/exclude; carry it): the wheels of xgrammar and jsonschema
# for Python 3.12 x86-64 at requirements.lock's versions, and SmolLM2's tokenizer saved as a
# directory (the structured bench's grammars need a real tokenizer; the 98 MB GGUF is too big to travel).
# Usage, here, from the repo root:  bash scripts/gpu/fetch_bench_carry.sh     (about 9 MiB)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PYTHON="${PYTHON:-.venv/bin/python}"
grep -qxF '/.gpucarry/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.gpucarry/' >> .git/info/exclude; }
rm -rf .gpucarry && mkdir -p .gpucarry/whl
mapfile -t pins < <(grep -i -E "^(xgrammar|apache-tvm-ffi|jsonschema|jsonschema-specifications|referencing|rpds-py)==" requirements.lock)
((${#pins[@]} == 6)) || { echo "fetch_bench_carry: expected 6 pins in requirements.lock, found ${#pins[@]}" >&2; exit 1; }
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .gpucarry/whl "${pins[@]}" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
"$PYTHON" -c "
from engine.tokenizer import Tokenizer
from engine.testing.smollm2 import smollm2_path
Tokenizer(smollm2_path()).hf.save_pretrained('.gpucarry/smollm2-tokenizer')"
echo "fetch_bench_carry: $(ls .gpucarry/whl | wc -l) wheels and the tokenizer, $(du -sh .gpucarry | cut -f1) in .gpucarry/"
