#!/usr/bin/env python3
"""Tensor-parallel all-reduce on this host's GPUs: symmetric memory against NCCL.

One process per GPU joins a group the way the engine's ranks do (``engine.distributed.process_group``,
which sets up the symmetric-memory all-reduce unless ``CHASSIS_TP_ALL_REDUCE=nccl``, taken as an engine
takes it). For decode-sized
inputs (one to 32 hidden rows of 4096, fp32 as the row-parallel layers send them) it checks that both
paths give the exact sum on every rank, then times ``--calls`` back-to-back all-reduces captured in
one CUDA graph, as decode replays them. Exit 1 on a wrong sum; 2 if the symmetric path is unavailable.
On one GPU it still checks the calls (world size 1), though the timings then mean little.

    python3 scripts/gpu/check_all_reduce.py [--world 2] [--calls 64]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

HIDDEN = 4096
ROWS = (1, 2, 8, 32)
REPLAYS = 20


def _rank(rank: int, world: int, port: int, calls: int, results) -> None:
    import torch
    import torch.distributed as dist

    from engine.distributed import group as tp_group
    from engine.distributed import process_group as pg
    from engine.graph_timing import time_in_graph
    from engine.switches import Switches

    Switches.from_environment().apply()
    device = pg.rank_device("cuda", rank)
    store = pg.join_store(port, world)
    pg.init_process_group(store, device, rank, world)
    fast = tp_group._symmetric
    rows_out = []
    wrong = []
    for rows in ROWS:
        x = torch.randn(rows, HIDDEN, device=device, dtype=torch.float32)
        dist.broadcast(x, src=0)
        exact = x.double() * world  # every rank sends the same values: the sum is exact
        nccl = x.clone()
        dist.all_reduce(nccl)
        if not torch.equal(nccl.double(), exact):
            wrong.append(f"nccl rows={rows}")
        row = {"rows": rows, "kib": x.numel() * 4 / 1024}
        row["nccl_us"] = time_in_graph(lambda i, x=x: dist.all_reduce(x.clone()), calls, REPLAYS)
        if fast is not None and fast.takes(x):
            got = fast(x)
            if not torch.equal(got.double(), exact):
                wrong.append(f"symmetric rows={rows}")
            gathered = [torch.empty_like(got) for _ in range(world)]
            dist.all_gather(gathered, got)
            if any(not torch.equal(g, gathered[0]) for g in gathered):
                wrong.append(f"symmetric rows={rows}: ranks disagree")
            row["symmetric_us"] = time_in_graph(lambda i, x=x: fast(x), calls, REPLAYS)
        rows_out.append(row)
    choice = None
    if fast is not None:  # what the engine's start-up measures to choose between them at two ranks
        from engine.distributed.symmetric_all_reduce import graph_timings

        choice = graph_timings(fast, device)
    if rank == 0:
        results.put((fast is not None, rows_out, wrong, choice))
    dist.barrier()
    pg.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--world", type=int, default=0, help="ranks (default: every visible GPU)")
    parser.add_argument("--calls", type=int, default=64, help="all-reduces per graph (a decode step has 64)")
    args = parser.parse_args(argv)
    import torch
    import torch.multiprocessing as mp

    from engine.distributed import process_group as pg

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    world = args.world or torch.cuda.device_count()
    if world < 1:
        print("error: no CUDA device visible", file=sys.stderr)
        return 2
    store = pg.create_store(world)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_rank, args=(r, world, store.port, args.calls, results)) for r in range(world)
    ]
    for p in procs:
        p.start()
    available, rows, wrong, choice = results.get(timeout=300)
    for p in procs:
        p.join(60)
    print(f"world size {world}, torch {torch.__version__}, symmetric memory: {'yes' if available else 'NO'}")
    print(f"{'rows':>5} {'KiB':>6} {'NCCL us':>9} {'symm us':>9}")
    for r in rows:
        symm = f"{r['symmetric_us']:9.2f}" if "symmetric_us" in r else f"{'-':>9}"
        print(f"{r['rows']:5d} {r['kib']:6.0f} {r['nccl_us']:9.2f} {symm}")
    if choice is not None:
        print(
            f"start-up timing (rank 0, one 4096-wide fp32 row): symmetric {choice[0]:.2f} us, NCCL {choice[1]:.2f} us"
        )
    for w in wrong:
        print(f"WRONG SUM: {w}", file=sys.stderr)
    if wrong or any(p.exitcode != 0 for p in procs):
        return 1
    return 0 if available else 2


if __name__ == "__main__":
    sys.exit(main())
