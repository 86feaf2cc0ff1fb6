#!/usr/bin/env python3
"""Measure ``kernels/fused_moe.py`` tiles at the MoE benchmark models' exact shapes and write the table
``kernels/fused_moe_configs`` reads (issue 16).

For every token bucket ``fused_moe_configs.token_bucket`` uses and both models (interleaved, the
issue's anchor sizes first, so a run cut by ``--budget`` still has them for both), a staged search: block_m x block_n
x block_k at 8 warps / 3 stages, then warps x stages at the best tiles; at buckets the small-batch
path serves (``uses_small_batch``) its GEMV tiles first, the grouped search still run beside them so
the report compares the two paths (the table keeps the small-batch winner there, the path those
batch sizes take). Each candidate runs
``--calls`` fused_moe calls, each with its own random routing (top-k distinct experts per token, as
the benchmark's random weights route), captured in one CUDA graph and replayed (``time_in_graph``).
A candidate whose output differs from ``fused_moe_reference`` is dropped. Reported per bucket: the
best and the default config's time, and the rate over the expert weight bytes the calls touched
(distinct experts per call x 3*H*I*2 bytes) against the measured copy bandwidth.

    python3 scripts/gpu/tune_moe.py --write-table $OUT/fused_moe_table.json --budget 240
    TRITON_INTERPRET=1 CHASSIS_KERNELS=triton python3 scripts/gpu/tune_moe.py --device cpu --tiny  # smoke
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from kernels.fused_moe import fused_moe, fused_moe_reference  # noqa: E402
from kernels.fused_moe_configs import (  # noqa: E402
    AnyMoeConfig,
    MoeConfig,
    MoeGemvConfig,
    MoeTable,
    default_config,
    default_gemv_config,
    uses_small_batch,
)

MODELS = {  # name: experts, hidden, intermediate, top_k (slots per token), shared experts among them
    "deepseek-v2-lite": (64, 2048, 1408, 6, 0),
    "qwen3-30b-a3b": (128, 2048, 768, 8, 0),
    # EngineConfig.shared_experts fused (the default on CUDA): 64 routed + 2 shared experts, 6 + 2 slots
    "deepseek-v2-lite-fused-shared": (66, 2048, 1408, 8, 2),
}
TINY_MODELS = {"tiny-a": (8, 64, 96, 2, 0), "tiny-b": (16, 64, 64, 4, 1)}
# The anchors first (bs1 decode, batch 128, prefill 2048, bs32), so a run cut by its budget has them.
BUCKETS = (1, 128, 2048, 32, 2, 4, 8, 16, 64, 256, 512)
DTYPE = torch.bfloat16


def tile_candidates(tokens: int, top_k: int, experts: int, tiny: bool) -> list[tuple[int, int, int]]:
    """(block_m, block_n, block_k) to try: block_m near the mean rows per expert (the padding unit),
    narrower tiles while programs are few, wider ones once rows fill them."""
    if tiny:
        return [(16, 32, 32), (16, 64, 64)]
    rows = tokens * top_k / experts
    if rows <= 4:
        ms, ns, ks = (16,), (32, 64, 128), (64, 128, 256)
    elif rows <= 16:
        ms, ns, ks = (16, 32), (32, 64, 128), (64, 128)
    elif rows <= 64:
        ms, ns, ks = (32, 64), (64, 128), (64, 128)
    else:
        ms, ns, ks = (64, 128), (64, 128, 256), (64, 128)
    # gate/up tiles are 2*block_n wide: leave out those whose accumulator alone fills the registers
    return [(m, n, k) for m in ms for n in ns for k in ks if m * 2 * n <= 128 * 256]


def small_batch_candidates(tiny: bool) -> list[MoeGemvConfig]:
    """(up_block_n, down_block_n, block_k) x (warps, stages) for the small-batch GEMVs."""
    if tiny:
        return [MoeGemvConfig(8, 8, 32, 4, 2)]
    # down_block_n 2: twice the down programs of 4 (at one token the down kernel ran at ~2.2 TB/s with
    # 512 programs of 4 rows, its gate/up twin at ~3.4 TB/s with 1,536)
    tiles = ((8, 8, 256), (8, 8, 128), (16, 8, 128), (4, 4, 512), (8, 16, 256), (4, 8, 256), (4, 2, 512),
             (8, 2, 256), (16, 2, 256))  # fmt: skip
    schedules = ((4, 2), (4, 3), (8, 2), (2, 2))
    return [MoeGemvConfig(*tile, w, s) for tile in tiles for w, s in schedules]


def schedule_candidates(tokens: int, tiny: bool) -> list[tuple[int, int]]:
    if tiny:
        return [(4, 2)]
    stages = (2, 3, 4, 5) if tokens <= 128 else (2, 3, 4)
    return [(w, s) for w in (4, 8) for s in stages]


def random_routings(calls: int, tokens: int, experts: int, top_k: int, device, shared: int = 0) -> list[tuple]:
    """Top-k distinct random experts per token; with ``shared``, the last ``shared`` experts take the
    last slots of every token (at weight 1), as the router appends fused shared experts."""
    routings = []
    routed = experts - shared
    for _ in range(calls):
        ids = torch.rand(tokens, routed, device=device).topk(top_k - shared, dim=1).indices
        fixed = torch.arange(routed, experts, device=device).expand(tokens, shared)
        ids = torch.cat([ids, fixed], dim=1).to(torch.int32)
        weights = torch.softmax(torch.randn(tokens, top_k, device=device), dim=1)
        weights[:, top_k - shared :] = 1.0
        routings.append((weights, ids))
    return routings


def time_calls(fn, calls: int, replays: int, device) -> float:
    """Microseconds per ``fn(i)``: in a CUDA graph on a GPU, a plain loop elsewhere (smoke runs)."""
    if device.type == "cuda":
        from engine.graph_timing import time_in_graph

        return time_in_graph(fn, calls, replays)
    samples = []
    for _ in range(replays):
        started = time.perf_counter()
        for i in range(calls):
            fn(i)
        samples.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(samples)


def copy_bandwidth(device) -> float:
    """GB/s of a device-to-device copy (read + write), the rate a weight stream is held against."""
    size = (1 << 30) if device.type == "cuda" else (1 << 24)
    src = torch.empty(size, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    return 2 * size / time_calls(lambda i: dst.copy_(src), 5, 5, device) / 1e3


class Bucket:
    """One (model, token count): inputs, routings, the reference output, and the timings so far."""

    def __init__(self, model, shape, tokens, weights, args, device):
        experts, hidden, inter, top_k, shared = shape
        self.model, self.shape, self.tokens, self.device = model, shape, tokens, device
        self.w13, self.w2 = weights
        self.calls = max(2, min(args.calls, -(-args.calls * 64 // tokens)))  # fewer calls at large M
        self.replays = args.replays
        self.x = torch.randn(tokens, hidden, device=device, dtype=DTYPE)
        self.routings = random_routings(self.calls, tokens, experts, top_k, device, shared)
        self.reference = fused_moe_reference(self.x, self.w13, self.w2, *self.routings[0])
        distinct = statistics.mean(len(torch.unique(ids)) for _, ids in self.routings)
        self.weight_bytes = distinct * 3 * hidden * inter * 2
        self.small = uses_small_batch(tokens, top_k)
        self.default = default_gemv_config() if self.small else default_config(tokens, top_k, experts)
        self.results: dict[AnyMoeConfig, float] = {}
        self.failed: list[str] = []

    def run(self, config: AnyMoeConfig) -> float | None:
        if config in self.results:
            return self.results[config]
        try:
            out = fused_moe(self.x, self.w13, self.w2, *self.routings[0], config=config)
            if not torch.allclose(out.float(), self.reference.float(), atol=3e-2, rtol=3e-2):
                self.failed.append(f"{_label(config)}: differs from the reference")
                return None
            us = time_calls(
                lambda i: fused_moe(self.x, self.w13, self.w2, *self.routings[i], config=config),
                self.calls, self.replays, self.device,
            )  # fmt: skip
        except Exception as exc:  # a config the GPU cannot run (shared memory, registers): skip it
            self.failed.append(f"{_label(config)}: {type(exc).__name__}: {str(exc)[:80]}")
            return None
        self.results[config] = us
        return us

    def best(self, kind: type = MoeConfig) -> tuple[AnyMoeConfig, float] | None:
        """The fastest config of one kind (path)."""
        ran = [(c, us) for c, us in self.results.items() if isinstance(c, kind)]
        return min(ran, key=lambda kv: kv[1]) if ran else None

    def best_served(self) -> tuple[AnyMoeConfig, float] | None:
        """The fastest config of the path ``choose_config`` takes at this bucket: the table's entry."""
        return self.best(MoeGemvConfig if self.small else MoeConfig)


def _label(c: AnyMoeConfig) -> str:
    if isinstance(c, MoeGemvConfig):
        return f"gemv up{c.up_block_n} down{c.down_block_n} k{c.block_k} w{c.num_warps} s{c.num_stages}"
    return f"m{c.block_m} n{c.block_n} k{c.block_k} w{c.num_warps} s{c.num_stages}"


def search(bucket: Bucket, deadline: float, tiny: bool) -> None:
    """Default first, then the tile sweep, then warps x stages at the best tiles, until ``deadline``."""
    experts, _, _, top_k, _ = bucket.shape
    bucket.run(bucket.default)
    for config in small_batch_candidates(tiny) if bucket.small else []:
        if time.monotonic() > deadline:
            return
        bucket.run(config)
    bucket.run(default_config(bucket.tokens, top_k, experts))
    for m, n, k in tile_candidates(bucket.tokens, top_k, experts, tiny):
        if time.monotonic() > deadline:
            return
        bucket.run(MoeConfig(m, n, k, *((4, 2) if tiny else (8, 3))))
    best = bucket.best()
    if best is None:
        return
    tiles = best[0]
    for warps, stages in schedule_candidates(bucket.tokens, tiny):
        if time.monotonic() > deadline:
            return
        bucket.run(MoeConfig(tiles.block_m, tiles.block_n, tiles.block_k, warps, stages))


def report(bucket: Bucket, copy_gbs: float) -> str:
    best = bucket.best_served()
    default_us = bucket.results.get(bucket.default)
    if best is None:
        return f"  {bucket.model:<18} T={bucket.tokens:<5} no config ran ({'; '.join(bucket.failed[:2])})"
    config, us = best
    rate = bucket.weight_bytes / us / 1e3
    default_text = f"{default_us:9.1f} us" if default_us is not None else "   failed   "
    speedup = f"{default_us / us:5.2f}x" if default_us is not None else "  -  "
    return (
        f"  {bucket.model:<18} T={bucket.tokens:<5} best {us:9.1f} us ({_label(config):<24}) default "
        f"{default_text} ({_label(bucket.default)}) {speedup}  {rate:6.0f} GB/s of weights = "
        f"{100 * rate / copy_gbs:5.1f}% of copy  [{len(bucket.results)} ran, {len(bucket.failed)} failed]"
        + _grouped_text(bucket)
    )


def _grouped_text(bucket: Bucket) -> str:
    """At a small-batch bucket, the grouped GEMMs' best beside the small path's."""
    grouped = bucket.best(MoeConfig) if bucket.small else None
    return f"; grouped best {grouped[1]:.1f} us ({_label(grouped[0])})" if grouped else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--budget", type=float, default=240, help="seconds for the search (then: what ran)")
    parser.add_argument("--calls", type=int, default=20, help="calls per graph at <= 64 tokens")
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument("--buckets", type=int, nargs="*", default=list(BUCKETS))
    parser.add_argument("--model", action="append", help="only these (default: both)")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, two candidates (CPU smoke run)")
    parser.add_argument("--write-table", type=Path, help="save the per-bucket winners here (MoeTable format)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    deadline = started + args.budget
    device = torch.device(args.device)
    models = TINY_MODELS if args.tiny else MODELS
    names = args.model or list(models)
    copy_gbs = copy_bandwidth(device)
    print(f"device {torch.cuda.get_device_name(device) if device.type == 'cuda' else device.type}: "
          f"copy {copy_gbs:.0f} GB/s; budget {args.budget:.0f} s")  # fmt: skip
    weights = {}
    for name in names:
        experts, hidden, inter, _, _ = models[name]
        weights[name] = (
            (torch.randn(experts, 2 * inter, hidden, device=device) / hidden**0.5).to(DTYPE),
            (torch.randn(experts, hidden, inter, device=device) / inter**0.5).to(DTYPE),
        )
    buckets: list[Bucket] = []
    for tokens in args.buckets:
        for name in names:
            if time.monotonic() > deadline:
                print(f"  {name:<18} T={tokens:<5} SKIPPED: budget spent")
                continue
            bucket = Bucket(name, models[name], tokens, weights[name], args, device)
            t0 = time.monotonic()
            search(bucket, deadline, args.tiny)
            buckets.append(bucket)
            print(report(bucket, copy_gbs) + f" {time.monotonic() - t0:.0f} s", flush=True)
            for failure in bucket.failed[:3]:
                print(f"      failed {failure}")
            if args.write_table:  # after every bucket: a run cut short still leaves what it measured
                save_table(args.write_table, buckets, device)
    print(f"search: {time.monotonic() - started:.0f} s")
    if args.write_table:
        print(f"wrote {args.write_table} ({len(MoeTable.load(args.write_table).entries)} entries)")
    return 0


def save_table(path: Path, buckets: list[Bucket], device: torch.device) -> None:
    """Each bucket's fastest config, under the device name ``choose_config`` looks up, over the entries
    of this device already in ``path`` (a run of a few buckets keeps the others)."""
    import triton

    from kernels._config_table import device_name

    table = MoeTable(device_name(device), {})
    kept = MoeTable.load(path) if path.is_file() else None
    if kept is not None and kept.device == table.device:
        table.entries.update(kept.entries)
    for bucket in buckets:
        best = bucket.best_served()
        if best is not None:
            experts, hidden, inter, _, _ = bucket.shape
            table.entries[(bucket.tokens, experts, hidden, inter)] = best[0]
    table.save(path, {"triton": triton.__version__, "torch": torch.__version__})


if __name__ == "__main__":
    sys.exit(main())
