"""The batch-invariant split decode against the one-pass kernel on a GPU: same bits, and the time.

``kernels/invariant_attention.py`` runs a step of single-token decodes as one program per (sequence,
KV head, 128-key segment) and a fold kernel; the one-pass kernel (prefill, chunks, resumes) folds
the same segments in one program. For Llama-3.1-8B's attention (32 query heads, 8 KV heads, head
dim 128, bf16, 16-token blocks) at each ``--case BATCH:CONTEXT`` (contexts spread up to CONTEXT),
this prints whether the split decode's output equals the one-pass kernel's bit for bit, at the
one-pass tile height and at ``--block-m`` others, and each one's microseconds per call (CUDA graph
of 20 calls), beside the normal mode's flash-decoding.

    python3 scripts/gpu/probe_invariant_attention.py --json "$OUT/probe_invariant_attention.json"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def graph_us(fn, calls: int = 20) -> float:
    """Microseconds per call of ``fn`` replayed from a CUDA graph of ``calls`` calls."""
    from engine.graph_timing import time_in_graph

    fn()
    return time_in_graph(lambda _i: fn(), calls, 5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", action="append", help="BATCH:CONTEXT (default 1:1152, 16:1152, 128:640)")
    parser.add_argument("--block-m", type=int, nargs="+", default=[16, 32], help="split tile heights to try")
    parser.add_argument("--window", type=int, default=None, help="a sliding window for every case")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import torch

    from kernels import invariant_attention as ia
    from kernels.paged_attention_decode import paged_attention_decode

    q_heads, kv_heads, head_dim, block_size = 32, 8, 128, 16
    scale = head_dim**-0.5
    results = {}
    for case in args.case or ["1:1152", "16:1152", "128:640"]:
        batch, context = (int(v) for v in case.split(":"))
        torch.manual_seed(batch)
        blocks_per_seq = -(-context // block_size) + 1
        num_blocks = batch * blocks_per_seq + 1
        k_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, device="cuda", dtype=torch.bfloat16)
        v_cache = torch.randn_like(k_cache)
        tables = torch.randperm(num_blocks - 1, device="cuda")[: batch * blocks_per_seq].view(batch, -1).int()
        seq_lens = torch.randint(context // 2, context + 1, (batch,), device="cuda", dtype=torch.int32)
        seq_lens[0] = context
        q = torch.randn(batch, q_heads, head_dim, device="cuda", dtype=torch.bfloat16)
        starts = torch.arange(batch + 1, device="cuda", dtype=torch.int32)
        slots = ia.segment_slots(tables.shape[1] * block_size, args.window)

        inputs = (q, k_cache, v_cache, tables, seq_lens)

        def one_pass(inputs=inputs, starts=starts):
            return ia._launch(*inputs, starts, scale, args.window)

        def split(block_m=None, inputs=inputs, slots=slots):
            return ia._launch_split_decode(*inputs, scale, args.window, None, slots, block_m)

        def flash(inputs=inputs):
            return paged_attention_decode(*inputs, scale, args.window)

        reference = one_pass()
        line = {
            "slots": slots,
            "one_pass_us": graph_us(one_pass),
            "flash_decoding_us": graph_us(flash),
        }
        for block_m in [None, *args.block_m]:
            name = f"split_m{block_m or 'default'}"
            try:
                same = torch.equal(split(block_m), reference)
                line[name] = {"same": same, "us": graph_us(lambda b=block_m, split=split: split(b))}
            except Exception as error:  # a tile the compiler refuses: said, and the probe goes on
                line[name] = {"error": f"{type(error).__name__}: {str(error)[:160]}"}
        results[case] = line
        print(case, json.dumps(line), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
