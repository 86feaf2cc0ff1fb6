"""Onload speed of the disk KV tier against the disk's own O_DIRECT read rate, per reader setting.

Writes ``--blocks`` Llama-3.1-8B-shape KV blocks (2 MiB each) to a disk tier, then for each setting
(read-ahead threads, files read ahead, O_DIRECT or buffered reads, with or without a host tier above
that the hits are promoted to) drops the files from the page cache and times one onload of all of
them into a device pool, to the device having them. Prints one line per setting and the anchor.

    python3 scripts/gpu/tune_disk_tier.py --dir /tmp/kv-tune [--blocks 512] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import torch

from engine.bench import bandwidth
from engine.kv.block_hash import hash_chain
from engine.kv.block_pool import Block
from engine.kv.specs import FullAttentionSpec
from engine.kv.tiers import connector, disk
from engine.kv.tiers.block_io import BlockIO
from engine.kv.tiers.connector import TieredKV
from engine.kv.tiers.host import HostMemoryTier
from engine.kv.tiers.pinned import PinnedBuffers
from engine.kv.tiers.protocol import Retention

LAYERS, BLOCK = 32, 16
SPEC = FullAttentionSpec(block_size=BLOCK, dtype="bfloat16", num_kv_heads=8, head_dim=128)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", required=True, help="directory on the disk to measure")
    parser.add_argument("--blocks", type=int, default=512, help="blocks onloaded per setting")
    parser.add_argument("--threads", type=int, nargs="+", default=[4, 8, 16], help="read-ahead threads")
    parser.add_argument("--ahead", type=int, nargs="+", default=[16, 64], help="files read ahead")
    parser.add_argument(
        "--device", default="cuda", help="where the pool lives (cpu: a dry run of the script)"
    )
    parser.add_argument(
        "--warm", action="store_true", help="also time each setting with the files in the page cache"
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile each setting's onload (top functions)"
    )
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    anchor = bandwidth.disk_read(root, 2 << 30)
    print(f"disk direct read {anchor.gb_per_s:.2f} GB/s ({anchor.method})", flush=True)

    caches = [
        torch.randn(SPEC.cache_shape(args.blocks + 1), device=device).to(torch.bfloat16)
        for _ in range(LAYERS)
    ]
    io = BlockIO(caches, [SPEC] * LAYERS)
    retention = Retention(budget_bytes=64 << 30, ttl_s=86_400.0)
    tokens = list(range(args.blocks * BLOCK))
    chain = hash_chain(tokens, BLOCK)
    parents = [None, *chain[:-1]]
    chunks = [tokens[i * BLOCK : (i + 1) * BLOCK] for i in range(args.blocks)]
    writer = TieredKV([disk.DiskTier(root / "tier", retention)], io, BLOCK)
    for i, h in enumerate(chain):
        writer.offload(Block(i, block_hash=h, parent_hash=parents[i], token_ids=tuple(chunks[i])))
    nbytes = args.blocks * io.block_bytes
    # One allocator for all settings, as the engine has one: its pinned chunks are made once.
    allocate = PinnedBuffers() if device.type == "cuda" else bytearray
    for _ in range(2 * args.blocks):
        allocate(io.block_bytes + 4096)
    results = []
    settings = itertools.product(
        args.threads, args.ahead, (False, True), (False, True), (False, True) if args.warm else (False,)
    )
    for threads, ahead, direct, promote, warm in settings:
        disk.READ_THREADS, disk.READ_AHEAD, disk.DIRECT_READS = threads, ahead, direct
        tiers = [disk.DiskTier(root / "tier", retention, allocate=allocate)]
        if promote:
            tiers.insert(0, HostMemoryTier(retention, allocate=allocate))
        tiered = TieredKV(tiers, BlockIO(caches, [SPEC] * LAYERS), BLOCK)
        files = sorted((root / "tier").glob("*/*.kvb"))
        if warm:
            problem = None
            for path in files:
                path.read_bytes()
        else:
            problem = bandwidth.drop_page_cache(files)
        spent: dict[str, float] = {}
        if args.profile:
            _time_calls(spent, tiered, tiers)
        sync()
        started = time.perf_counter()
        loaded = tiered.onload(chain, parents, chunks, list(range(1, args.blocks + 1)))
        sync()
        seconds = time.perf_counter() - started
        row = {"threads": threads, "ahead": ahead, "direct": direct, "promote": promote, "warm": warm, "loaded": loaded,
               "gb_per_s": round(nbytes / seconds / 1e9, 3), "of_direct_read": round(nbytes / seconds / 1e9 / anchor.gb_per_s, 3),
               "page_cache_problem": problem, "seconds": round(seconds, 4),
               "spent_s": {k: round(v, 4) for k, v in spent.items()}}  # fmt: skip
        results.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"anchor_gb_per_s": anchor.gb_per_s, "results": results}, indent=1)
        )
    return 0


def _time_calls(spent: dict[str, float], tiered: TieredKV, tiers: list) -> None:
    """Wrap the onload's steps (tier reads, record decoding, device copies, the end) in timers."""

    def timed(name, fn):
        def call(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - t

        return call

    for tier in tiers:
        tier.get = timed(f"{tier.name}.get", tier.get)
        tier.put = timed(f"{tier.name}.put", tier.put)
        tier.contains = timed(f"{tier.name}.contains", tier.contains)
        if hasattr(tier, "prefetch"):
            tier.prefetch = timed(f"{tier.name}.prefetch", tier.prefetch)
    tiered.copier.write_block = timed("write_block", tiered.copier.write_block)
    tiered.copier.finish = timed("finish", tiered.copier.finish)
    connector.decode_record = timed("decode_record", _DECODE_RECORD)


_DECODE_RECORD = connector.decode_record  # the original, wrapped afresh for each setting


if __name__ == "__main__":
    raise SystemExit(main())
