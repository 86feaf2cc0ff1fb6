#!/usr/bin/env python3
"""One GPU: the batch-1 decode step of one tensor-parallel rank's shard, with its collectives skipped.

Builds the engine twice in one process on the same random-weight architecture: as it runs at
tensor_parallel_size=1, then with rank 0 of ``--tp`` ranks' shard of every layer (heads, MLP rows and
vocabulary split as at that size) whose all-reduces, gathers and broadcasts do nothing (the values are
wrong; the shapes, kernels and CUDA graphs are those of a real rank). The difference between the two
steps is what splitting buys before communication; with ``--target`` (the speedup wanted, 1.6 for
issue 8) it prints how much time per all-reduce the split may spend and still reach it. A lower
bound for a tensor-parallel step, measurable before a multi-GPU machine is lent.

    python3 scripts/gpu/shard_step.py --tp 2 --random-arch llama-3.1-8b --target 1.6
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.distributed.group import TPGroup  # noqa: E402


class SilentRank(TPGroup):
    """Rank 0 of ``world_size`` whose collectives move nothing: a shard's compute, timed alone."""

    def all_reduce(self, x):
        return x

    def broadcast_from_first(self, x):
        return x

    def all_gather_last_dim(self, x):
        import torch

        return torch.cat([x] * self.world_size, dim=-1)  # the gathered width, as a real gather writes


def _decode(model_dir: Path, vocab: int, group: TPGroup | None, args) -> dict[str, float]:
    import torch

    from engine import LLM
    from engine.bench.workloads import decode_bs1
    from engine.core import engine_core as core_module
    from engine.executor.factory import runner_kwargs
    from engine.executor.single_device import SingleDeviceExecutor

    original = core_module.make_executor
    if group is not None:
        core_module.make_executor = lambda *a: SingleDeviceExecutor(**runner_kwargs(*a), tp_group=group)
    try:
        llm = LLM(
            model_dir,
            device=args.device,
            dtype=args.dtype,
            load_format="dummy",
            max_num_seqs=8,
            num_gpu_blocks=2048,
            max_model_len=8192,
        )
    finally:
        core_module.make_executor = original
    figures = decode_bs1(llm, vocab, prompt_len=args.prompt_len, output_len=args.output_len).figures
    llm.shutdown()
    del llm
    gc.collect()
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tp", type=int, default=2, help="tensor-parallel size whose rank-0 shard is timed")
    parser.add_argument(
        "--random-arch", default="llama-3.1-8b", help="architecture (engine.bench.random_arch)"
    )
    parser.add_argument("--prompt-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--target", type=float, default=1.6, help="speedup over TP=1 the split should reach")
    parser.add_argument(
        "--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a dry run (tiny-llama)"
    )
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    args = parser.parse_args(argv)
    import torch

    from engine.bench.random_arch import hf_config, write_config_dir

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device visible", file=sys.stderr)
        return 2
    config = hf_config(args.random_arch)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_config_dir(args.random_arch, Path(tmp) / args.random_arch)
        whole = _decode(model_dir, config["vocab_size"], None, args)
        shard = _decode(model_dir, config["vocab_size"], SilentRank(0, args.tp), args)
    one, part = whole["ms_per_step"], shard["ms_per_step"]
    print(f"{args.random_arch}, batch 1, prompt {args.prompt_len}, {args.output_len} tokens, {args.device}")
    print(
        f"TP=1 step                          {one:7.3f} ms  (graph replay {whole.get('graph_replay_ms', 0):.3f})"
    )
    print(
        f"rank-0 shard of TP={args.tp}, no comms   {part:7.3f} ms  (graph replay {shard.get('graph_replay_ms', 0):.3f})"
    )
    print(f"speedup before communication       {one / part:7.2f}x")
    budget_ms = one / args.target - part
    reduces = 2 * config["num_hidden_layers"]
    print(
        f"for {args.target}x the communication may take {budget_ms:.3f} ms per step: "
        f"{1e3 * budget_ms / reduces:.2f} us per all-reduce ({reduces} per step)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
