#!/usr/bin/env python3
"""Check the Triton kernels on a CUDA GPU: run tests/kernels there, then time each kernel.

Step 1 runs ``pytest tests/kernels`` (the CUDA variants of every kernel-vs-reference test).
Step 2 times every Triton kernel against its torch reference at Llama-3.1-8B shapes (hidden 4096,
32 query / 8 KV heads, head_dim 128, KV block 16, bf16) with ``triton.testing.do_bench`` (median),
and prints a table with achieved GB/s for the memory-bound ops and TFLOP/s for prefill attention.

Needs only torch, triton, numpy and pytest. Example:

    python scripts/gpu/check_kernels.py            # tests, then benchmarks
    python scripts/gpu/check_kernels.py --skip-tests --only decode
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

HIDDEN, INTERMEDIATE = 4096, 14336
Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 8, 128, 16
DECODE_BATCHES, DECODE_CONTEXTS = (1, 32, 128), (1024, 4096)
PREFILL_TOKENS = 2048


@dataclass
class Row:
    op: str
    shape: str
    triton_us: float
    torch_us: float
    max_diff: float
    bytes_moved: int = 0
    flops: int = 0

    def render(self) -> str:
        rate = ""
        if self.bytes_moved:
            rate = f"{self.bytes_moved / self.triton_us / 1e3:8.0f} GB/s"
        elif self.flops:
            rate = f"{self.flops / self.triton_us / 1e6:8.1f} TFLOP/s"
        speedup = self.torch_us / self.triton_us
        return (
            f"{self.op:<24} {self.shape:<28} {self.triton_us:>10.1f} {self.torch_us:>11.1f} "
            f"{speedup:>7.1f}x {rate:>15} {self.max_diff:>9.2e}"
        )


HEADER = f"{'op':<24} {'shape':<28} {'triton us':>10} {'torch us':>11} {'speedup':>8} {'achieved':>15} {'max|diff|':>9}"


def run_tests(extra: list[str]) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "CHASSIS_KERNELS")}
    cmd = [sys.executable, "-m", "pytest", "tests/kernels", "-q", "-p", "no:cacheprovider", *extra]
    print("$", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=REPO_ROOT, env=env)


def bench_pair(triton_call, torch_call, rep_ms: int) -> tuple[float, float, float]:
    """Median microseconds of each ``(fn, *args)`` call, and the max abs difference of their outputs."""
    from triton.testing import do_bench

    def first(out):
        return out[0] if isinstance(out, tuple) else out

    triton_fn = functools.partial(*triton_call)
    torch_fn = functools.partial(*torch_call)
    diff = (first(triton_fn()).float() - first(torch_fn()).float()).abs().max().item()
    triton_ms = do_bench(triton_fn, rep=rep_ms, return_mode="median")
    torch_ms = do_bench(torch_fn, rep=rep_ms, return_mode="median")
    return triton_ms * 1e3, torch_ms * 1e3, diff


def elementwise_rows(torch, rep_ms: int, dtype) -> list[Row]:
    from kernels import activation, kv_cache_write, rms_norm, rope_kv_write, rotary

    rows = []
    size = torch.tensor([], dtype=dtype).element_size()
    for tokens in (32, PREFILL_TOKENS):
        x = torch.randn(tokens, HIDDEN, device="cuda", dtype=dtype)
        residual = torch.randn_like(x)
        weight = torch.randn(HIDDEN, device="cuda", dtype=dtype)
        t, r, d = bench_pair(
            (rms_norm._launch, x, weight, 1e-5, None),
            (rms_norm.rms_norm_torch, x, weight, 1e-5),
            rep_ms,
        )
        rows.append(Row("rms_norm", f"T={tokens} H={HIDDEN}", t, r, d, 2 * x.numel() * size))
        t, r, d = bench_pair(
            (rms_norm._launch, x, weight, 1e-5, residual),
            (rms_norm.fused_add_rms_norm_torch, x, residual, weight, 1e-5),
            rep_ms,
        )
        rows.append(Row("fused_add_rms_norm", f"T={tokens} H={HIDDEN}", t, r, d, 4 * x.numel() * size))

    gate_up = torch.randn(PREFILL_TOKENS, 2 * INTERMEDIATE, device="cuda", dtype=dtype)
    t, r, d = bench_pair((activation._launch, gate_up), (activation.silu_and_mul_torch, gate_up), rep_ms)
    rows.append(
        Row("silu_and_mul", f"T={PREFILL_TOKENS} I={INTERMEDIATE}", t, r, d, gate_up.numel() * size * 3 // 2)
    )

    cache = rotary.build_cos_sin_cache(HEAD_DIM, 8192, 500000.0, None, "cuda")
    positions = torch.randint(0, 8192, (PREFILL_TOKENS,), device="cuda")
    q = torch.randn(PREFILL_TOKENS, Q_HEADS, HEAD_DIM, device="cuda", dtype=dtype)
    k = torch.randn(PREFILL_TOKENS, KV_HEADS, HEAD_DIM, device="cuda", dtype=dtype)
    t, r, d = bench_pair(
        (rotary._launch, positions, q, k, cache, True),
        (rotary.rotary_embedding_torch, positions, q, k, cache, True),
        rep_ms,
    )
    moved = 2 * (q.numel() + k.numel()) * size + PREFILL_TOKENS * HEAD_DIM * 4
    rows.append(
        Row("rotary_embedding", f"T={PREFILL_TOKENS} {Q_HEADS}/{KV_HEADS}x{HEAD_DIM}", t, r, d, moved)
    )

    num_blocks = PREFILL_TOKENS // BLOCK_SIZE * 2
    caches = [
        torch.zeros(num_blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM, device="cuda", dtype=dtype) for _ in range(4)
    ]
    slots = torch.randperm(num_blocks * BLOCK_SIZE, device="cuda")[:PREFILL_TOKENS]
    value = torch.randn_like(k)
    t, r, d = bench_pair(
        (_write_then_read, kv_cache_write._launch, k, value, caches[0], caches[1], slots),
        (_write_then_read, kv_cache_write.write_kv_cache_torch, k, value, caches[2], caches[3], slots),
        rep_ms,
    )
    rows.append(
        Row("write_kv_cache", f"T={PREFILL_TOKENS} {KV_HEADS}x{HEAD_DIM}", t, r, d, 4 * k.numel() * size)
    )
    t, r, d = bench_pair(
        (rope_kv_write._launch, positions, q, k, value, cache, caches[0], caches[1], slots, True, False),
        (rope_kv_write.rope_and_write_kv_torch, positions, q, k, value, cache, caches[2], caches[3], slots),
        rep_ms,
    )
    moved = (2 * q.numel() + 4 * k.numel()) * size  # q in and out; k and v in, both into the cache
    rows.append(
        Row("rope_and_write_kv", f"T={PREFILL_TOKENS} {Q_HEADS}/{KV_HEADS}x{HEAD_DIM}", t, r, d, moved)
    )
    return rows


def gemv_rows(torch, rep_ms: int, dtype) -> list[Row]:
    """Triton GEMV against cuBLAS (the "torch" column) on weights far larger than L2; the in-graph,
    L2-cold comparison over every config is scripts/gpu/bench_decode_kernels.py."""
    import torch.nn.functional as F

    from kernels import activation, gemv

    rows = []
    size = torch.tensor([], dtype=dtype).element_size()
    weight = torch.randn(2 * INTERMEDIATE, HIDDEN, device="cuda", dtype=dtype) / HIDDEN**0.5
    down = torch.randn(HIDDEN, INTERMEDIATE, device="cuda", dtype=dtype) / INTERMEDIATE**0.5
    for m in (1, 8):
        x = torch.randn(m, HIDDEN, device="cuda", dtype=dtype)
        t, r, d = bench_pair((gemv._launch, x, weight, None, False), (F.linear, x, weight), rep_ms)
        rows.append(
            Row("gemv vs cuBLAS", f"M={m} {2 * INTERMEDIATE}x{HIDDEN}", t, r, d, weight.numel() * size)
        )
        gate_up = torch.randn(m, 2 * INTERMEDIATE, device="cuda", dtype=dtype)
        t, r, d = bench_pair(
            (gemv._launch, gate_up, down, None, True), (_silu_then_linear, activation, gate_up, down), rep_ms
        )
        rows.append(
            Row("gemv_silu vs 2 kernels", f"M={m} {HIDDEN}x{INTERMEDIATE}", t, r, d, down.numel() * size)
        )
    return rows


def _silu_then_linear(activation, gate_up, weight):
    import torch.nn.functional as F

    return F.linear(activation.silu_and_mul(gate_up), weight)


def _write_then_read(write, key, value, k_cache, v_cache, slots):
    write(key, value, k_cache, v_cache, slots)
    return k_cache


def make_paged(torch, batch: int, context: int, dtype):
    blocks_per_seq = -(-context // BLOCK_SIZE)
    num_blocks = batch * blocks_per_seq
    k_cache = torch.randn(num_blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM, device="cuda", dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    block_tables = torch.randperm(num_blocks, device="cuda").view(batch, blocks_per_seq).to(torch.int32)
    seq_lens = torch.full((batch,), context, device="cuda", dtype=torch.int32)
    return k_cache, v_cache, block_tables, seq_lens


def attention_rows(torch, rep_ms: int, dtype, only: str | None) -> list[Row]:
    from kernels import paged_attention as pa
    from kernels import paged_attention_decode as pad

    rows = []
    size = torch.tensor([], dtype=dtype).element_size()
    scale = HEAD_DIM**-0.5
    if only in (None, "decode"):
        for context in DECODE_CONTEXTS:
            for batch in DECODE_BATCHES:
                k_cache, v_cache, block_tables, seq_lens = make_paged(torch, batch, context, dtype)
                q = torch.randn(batch, Q_HEADS, HEAD_DIM, device="cuda", dtype=dtype)
                splits = pad.choose_num_splits(batch, KV_HEADS, block_tables.shape[1] * BLOCK_SIZE, q.device)
                paged = (q, k_cache, v_cache, block_tables, seq_lens)
                reference = (pad.paged_attention_decode_torch, *paged, scale, None)
                t, r, d = bench_pair((pad._launch, *paged, scale, None, None), reference, rep_ms)
                moved = 2 * batch * context * KV_HEADS * HEAD_DIM * size
                rows.append(
                    Row("decode (split-K)", f"B={batch} ctx={context} splits={splits}", t, r, d, moved)
                )
                if batch == 32:
                    qsl = torch.arange(batch + 1, device="cuda", dtype=torch.int32)
                    t, r, d = bench_pair((pa._launch, *paged[:5], qsl, scale, None), reference, rep_ms)
                    rows.append(Row("decode via varlen", f"B={batch} ctx={context}", t, r, d, moved))
                del k_cache, v_cache
    if only in (None, "prefill"):
        k_cache, v_cache, block_tables, seq_lens = make_paged(torch, 1, PREFILL_TOKENS, dtype)
        q = torch.randn(PREFILL_TOKENS, Q_HEADS, HEAD_DIM, device="cuda", dtype=dtype)
        qsl = torch.tensor([0, PREFILL_TOKENS], device="cuda", dtype=torch.int32)
        paged = (q, k_cache, v_cache, block_tables, seq_lens, qsl, scale, None)
        t, r, d = bench_pair((pa._launch, *paged), (pa.paged_attention_torch, *paged), rep_ms)
        causal_flops = 4 * Q_HEADS * HEAD_DIM * PREFILL_TOKENS * (PREFILL_TOKENS + 1) // 2
        rows.append(Row("prefill (varlen)", f"T={PREFILL_TOKENS} causal", t, r, d, flops=causal_flops))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--skip-tests", action="store_true", help="do not run pytest tests/kernels first")
    parser.add_argument("--skip-bench", action="store_true", help="run the tests only")
    parser.add_argument(
        "--only", choices=["elementwise", "decode", "prefill"], help="benchmark one group of kernels only"
    )
    parser.add_argument(
        "--dtype", choices=["bf16", "fp16"], default="bf16", help="benchmark dtype (default bf16)"
    )
    parser.add_argument("--rep-ms", type=int, default=100, help="do_bench measuring time per case in ms")
    parser.add_argument("pytest_args", nargs="*", help="extra arguments passed to pytest (after --)")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print(
            "error: no CUDA device visible; this script checks the Triton kernels on a GPU", file=sys.stderr
        )
        return 2
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)

    status = 0
    if not args.skip_tests:
        status = run_tests(args.pytest_args)
        print(f"pytest exit status: {status}", flush=True)
    if args.skip_bench:
        return status

    os.environ.pop("CHASSIS_KERNELS", None)
    import triton

    print(f"triton {triton.__version__}", flush=True)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    torch.manual_seed(0)
    print(HEADER)
    with torch.inference_mode():
        rows = [] if args.only not in (None, "elementwise") else elementwise_rows(torch, args.rep_ms, dtype)
        for row in rows:
            print(row.render(), flush=True)
        if args.only != "elementwise":
            for row in attention_rows(torch, args.rep_ms, dtype, args.only):
                print(row.render(), flush=True)
        if args.only in (None, "decode"):
            for row in gemv_rows(torch, args.rep_ms, dtype):
                print(row.render(), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
