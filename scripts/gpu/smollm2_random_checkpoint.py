"""SmolLM2-135M-Instruct's shape with seeded random weights, and SmolLM2's real tokenizer and chat
template: what the CPU benchmarks on the GPU host serve where the 98 MB GGUF cannot travel.

Usage: python3 scripts/gpu/smollm2_random_checkpoint.py OUT_DIR TOKENIZER_DIR
(TOKENIZER_DIR: scripts/gpu/fetch_bench_carry.sh saves it as .gpucarry/smollm2-tokenizer)
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from engine.bench.random_arch import write_random_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="checkpoint directory to write")
    parser.add_argument("tokenizer_dir", type=Path, help="SmolLM2's tokenizer saved as a directory")
    args = parser.parse_args()
    write_random_checkpoint("smollm2-135m", args.out_dir)
    for path in args.out_dir.iterdir():  # the id tokenizer and plain template it comes with
        if path.name != "config.json" and not path.name.startswith("model"):
            path.unlink()
    for path in args.tokenizer_dir.iterdir():
        shutil.copy(path, args.out_dir / path.name)
    print(f"wrote {args.out_dir}")


if __name__ == "__main__":
    main()
