"""``chassis make-tiny-model``: write a small checkpoint (random or briefly trained) with a real tokenizer."""

from __future__ import annotations

import argparse
import sys

HELP = "Write a tiny checkpoint (real BPE tokenizer, chat template; random or briefly trained weights)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from engine.testing.tiny_model import ARCHES, DTYPES

    parser.add_argument("out_dir", metavar="OUT_DIR", help="directory to write (created if missing)")
    parser.add_argument("--arch", choices=ARCHES, default="qwen3", help="architecture (default: qwen3)")
    parser.add_argument("--seed", type=int, default=0, help="weight and training seed (default: 0)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="weight dtype (default: float32)")
    parser.add_argument("--shards", type=int, default=1, help="number of safetensors shards (default: 1)")
    parser.add_argument(
        "--train-steps",
        type=int,
        default=0,
        metavar="N",
        help="then train the weights for N steps on the tokenizer's corpus, on CUDA when available, "
        "so that greedy choices are clear rather than near-ties; prints the train and held-out loss "
        "(default: 0, random weights)",
    )


def run(args: argparse.Namespace) -> int:
    from engine.testing.tiny_model import make_tiny_model

    if args.train_steps < 0:
        print(f"make-tiny-model: --train-steps must be >= 0, got {args.train_steps}", file=sys.stderr)
        return 2
    try:
        out = make_tiny_model(
            args.out_dir, arch=args.arch, seed=args.seed, dtype=args.dtype, num_shards=args.shards
        )
        if args.train_steps:
            from engine.testing.tiny_training import train_tiny_model

            train_tiny_model(out, args.train_steps, seed=args.seed)
    except (ValueError, OSError) as exc:
        print(f"make-tiny-model: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0
