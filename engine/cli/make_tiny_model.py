"""``chassis make-tiny-model``: write a small random checkpoint with a real tokenizer."""

from __future__ import annotations

import argparse
import sys

HELP = "Write a tiny random checkpoint (real BPE tokenizer, chat template) for tests and demos."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from engine.tiny_model import ARCHES, DTYPES

    parser.add_argument("out_dir", metavar="OUT_DIR", help="directory to write (created if missing)")
    parser.add_argument("--arch", choices=ARCHES, default="qwen3", help="architecture (default: qwen3)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default: 0)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="weight dtype (default: float32)")
    parser.add_argument("--shards", type=int, default=1, help="number of safetensors shards (default: 1)")


def run(args: argparse.Namespace) -> int:
    from engine.tiny_model import make_tiny_model

    try:
        out = make_tiny_model(
            args.out_dir, arch=args.arch, seed=args.seed, dtype=args.dtype, num_shards=args.shards
        )
    except (ValueError, OSError) as exc:
        print(f"make-tiny-model: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0
