"""Time the MLA decode kernel's tile candidates (kernels/mla_decode.py ``MlaDecodeTiles``) at
DeepSeek-V2-Lite's shape (16 heads, latent 512 + rope 64, pages of 16 tokens) on one GPU.

Each candidate runs inside a CUDA graph (ten calls per replay), so the figure is GPU time with no
launch overhead, as a decode step replays it; outputs are checked against the default tiles'. Prints,
per (batch, context) case, every candidate's microseconds and the latent bytes it reads per second,
best first, and writes them as JSON.

    python3 scripts/gpu/tune_mla_decode.py --json /tmp/mla_tiles.json
    # as a decode graph of the engine calls it: tables as wide as the longest sequence allowed
    # (DeepSeek-V2-Lite's 163,840 positions), which sets the split count, at the bench's context
    python3 scripts/gpu/tune_mla_decode.py --case 1:1280 --case 1:4096 --table-tokens 163840
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

HEADS, RANK, ROPE, BLOCK_SIZE = 16, 512, 64, 16
CASES = ((1, 1024), (1, 4096), (32, 1024), (128, 576), (256, 800))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="write every timing here")
    parser.add_argument("--top", type=int, default=6, help="candidates printed per case")
    parser.add_argument(
        "--case",
        action="append",
        metavar="BATCH:CONTEXT",
        help="a (batch, context) case, repeatable (default: " + " ".join(f"{b}:{c}" for b, c in CASES) + ")",
    )
    parser.add_argument(
        "--table-tokens",
        type=int,
        help="block tables this many tokens wide, padded with block 0 as a CUDA graph's are (default: "
        "exactly the context); the split count follows the width",
    )
    args = parser.parse_args(argv)
    try:
        cases = [tuple(int(v) for v in case.split(":")) for case in args.case] if args.case else list(CASES)
    except ValueError:
        parser.error("--case takes BATCH:CONTEXT, e.g. 1:1280")
    import torch

    from engine.graph_timing import time_in_graph
    from kernels.mla_decode import DEFAULT_TILES, MlaDecodeTiles, default_tiles, mla_decode

    candidates = [DEFAULT_TILES] + [
        MlaDecodeTiles(block_n, warps, stages, min_keys)
        for block_n, warps, stages, min_keys in itertools.product(
            (16, 32, 64), (4, 8), (None, 1, 2, 3), (64, 128, 256)
        )
        if MlaDecodeTiles(block_n, warps, stages, min_keys) != DEFAULT_TILES
    ]
    # A split floor (the sequence's own keys per split, on the device): matters where the tables are
    # wider than the context (--table-tokens), as in the engine's decode graphs.
    candidates += [
        MlaDecodeTiles(block_n, warps, None, 64, floor)
        for block_n, warps, floor in itertools.product((16, 32, 64), (4, 8), (64, 128, 256))
    ]
    device = torch.device("cuda")
    results = []
    for batch, context in cases:
        torch.manual_seed(batch * 7919 + context)
        pages = -(-context // BLOCK_SIZE)
        cache = torch.randn(batch * pages + 8, BLOCK_SIZE, RANK + ROPE, device=device).bfloat16()
        block_tables = torch.randperm(batch * pages, device=device).view(batch, pages).int()
        width = -(-args.table_tokens // BLOCK_SIZE) if args.table_tokens else pages
        if width > pages:
            pad = torch.zeros(batch, width - pages, dtype=torch.int32, device=device)
            block_tables = torch.cat([block_tables, pad], dim=1)
        seq_lens = torch.full((batch,), context, dtype=torch.int32, device=device)
        q_latent = torch.randn(batch, HEADS, RANK, device=device).bfloat16()
        q_rope = torch.randn(batch, HEADS, ROPE, device=device).bfloat16()
        scale = 192**-0.5
        operands = (q_latent, q_rope, cache, block_tables, seq_lens, scale)
        expected = mla_decode(*operands)
        latent_bytes = batch * context * (RANK + ROPE) * 2
        rows = []
        for tiles in candidates:
            try:
                call = functools.partial(mla_decode, *operands, tiles=tiles)
                out = call()  # compiles; checked below
                micros = time_in_graph(lambda _i, call=call: call(), 10, 5)
            except Exception as error:  # a candidate the compiler or the SM's resources refuse
                print(f"  {tiles}: failed ({type(error).__name__}: {str(error)[:80]})")
                continue
            error = (out.float() - expected.float()).abs().max().item()
            rows.append(
                {
                    "tiles": tiles._asdict(),
                    "us": micros,
                    "tb_per_s": latent_bytes / micros / 1e6,
                    "max_abs_diff": error,
                }
            )
        rows.sort(key=lambda row: row["us"])
        default = next(row for row in rows if row["tiles"] == default_tiles(batch)._asdict())
        print(
            f"\nbatch {batch}, context {context}: default {default['us']:.1f} us ({default['tb_per_s']:.2f} TB/s)"
        )
        for row in rows[: args.top]:
            print(
                f"  {row['us']:8.1f} us {row['tb_per_s']:5.2f} TB/s  diff {row['max_abs_diff']:.2e}  {row['tiles']}"
            )
        results.append({"batch": batch, "context": context, "rows": rows})
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
