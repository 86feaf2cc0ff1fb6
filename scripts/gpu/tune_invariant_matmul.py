#!/usr/bin/env python3
"""Time the invariant GEMM's tile configs per row bucket and write ``kernels/invariant_matmul_table.json``.

For each product of ``--random-arch`` (fused q/k/v, o, fused gate/up, down, LM head, as its
config.json sizes them) and every row bucket of ``kernels/invariant_matmul_configs.py``, each
candidate tile config runs a random input of the bucket's row count; only candidates whose output is
bitwise the reference config's stay (the engine verifies the chosen ones again when it starts). Each
is timed as ``--launches`` back-to-back launches in one CUDA graph, replayed ``--replays`` times
(the median counts: no Python launch cost in the figure), cuBLAS (``F.linear``) the same way for
comparison. The fastest per (product, bucket) goes to the table where it beats the reference.

On the H200 (Llama-3.1-8B's five products, 14 buckets, compiles included; about 200 s at most):

    python3 scripts/gpu/tune_invariant_matmul.py --write-table "$OUT/invariant_matmul_table.json" \\
        --json "$OUT/tune_invariant_matmul.json"

On CPU (``tests/scripts/gpu/test_tune_invariant_matmul.py``) ``--device cpu`` runs the kernels in
Triton's interpreter, timed by the wall clock: ``--random-arch tiny-llama`` with few buckets and
candidates.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.bench.random_arch import hf_config  # noqa: E402

# MxNxK/warps/stages. Narrow tiles stream the weight at a few rows; 128-256 row tiles reuse it in a
# prefill (probe.log, 4096x4096 at 2,048 rows: 64x32x128 298 us, 128x128x64/8/3 121 us, cuBLAS 88 us).
CANDIDATES = (
    "16x16x256/4/4",
    "16x32x256/4/4",
    "16x64x256/4/3",
    "16x32x128/4/5",
    "16x16x512/4/3",
    "16x32x256/4/5",
    "16x32x512/4/3",
    "16x16x128/4/6",
    "16x64x128/4/5",
    "32x32x256/4/4",
    "32x64x128/4/4",
    "64x64x128/4/4",
    "64x128x64/4/4",
    "128x64x64/4/4",
    "64x128x128/4/3",
    "128x128x64/8/3",
    "128x256x64/8/3",
    "128x128x64/8/4",
    "256x128x64/8/3",
    "128x128x128/8/3",
)
# BLOCK_M <= 32 tiles re-read the weight every 16-32 rows: 4-5x slower than 128x128 tiles at 2,048
# rows in probe.log, so not timed above this many rows.
SMALL_M_MAX_ROWS = 512


def products(config: dict) -> dict[str, tuple[int, int]]:
    """(N, K) of each distinct product of a Llama-family config, by name."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    shapes = {
        "qkv": (q + 2 * kv, hidden),
        "o": (hidden, q),
        "gate_up": (2 * inter, hidden),
        "down": (hidden, inter),
        "lm_head": (config["vocab_size"], hidden),
    }
    distinct: dict[tuple[int, int], str] = {}
    for name, shape in shapes.items():
        distinct.setdefault(shape, name)
    return {name: shape for shape, name in distinct.items()}


def candidates(labels: list[str], n: int, k: int, rows: int):
    """The reference first, then the candidates worth timing at ``rows``, each once."""
    from kernels.invariant_matmul_configs import MatmulConfig, reference_config

    configs = [reference_config(n, k)] + [MatmulConfig.parse(label) for label in labels]
    return list(dict.fromkeys(c for c in configs if rows <= SMALL_M_MAX_ROWS or c.block_m > 32))


def time_calls(fn, launches: int, replays: int, device) -> float:
    """Microseconds per ``fn()``: in a CUDA graph on a GPU, a plain loop elsewhere (CPU runs)."""
    if device.type == "cuda":
        from engine.graph_timing import time_in_graph

        return time_in_graph(lambda i: fn(), launches, replays)
    fn()
    samples = []
    for _ in range(replays):
        started = time.perf_counter()
        for _ in range(launches):
            fn()
        samples.append((time.perf_counter() - started) / launches * 1e6)
    return statistics.median(samples)


def tune_bucket(name: str, weight, x, labels: list[str], args) -> dict:
    """Every candidate at ``x``'s row count: bitwise against the reference, then timed."""
    import torch
    import torch.nn.functional as F

    from kernels.invariant_matmul import invariant_matmul

    n, k = weight.shape
    rows = x.shape[0]
    configs = candidates(labels, n, k, rows)
    reference = invariant_matmul(x, weight, config=configs[0])
    result = {
        "product": name,
        "n": n,
        "k": k,
        "rows": rows,
        "reference": configs[0].label(),
        "candidates": {},
    }
    result["cublas_us"] = time_calls(lambda: F.linear(x, weight), args.launches, args.replays, x.device)
    for config in configs:
        line = result["candidates"][config.label()] = {}
        try:
            line["same"] = torch.equal(invariant_matmul(x, weight, config=config), reference)
            if line["same"]:
                run = functools.partial(invariant_matmul, x, weight, config=config)
                line["us"] = time_calls(run, args.launches, args.replays, x.device)
        except Exception as error:  # a tile the compiler refuses: said, and the sweep goes on
            line["error"] = f"{type(error).__name__}: {str(error)[:160]}"
    timed = {label: line["us"] for label, line in result["candidates"].items() if "us" in line}
    result["reference_us"] = timed[result["reference"]]
    result["best"] = min(timed, key=timed.get)
    result["best_us"] = timed[result["best"]]
    return result


def print_line(result: dict) -> None:
    lines = result["candidates"].values()
    matched, errors = sum(1 for v in lines if v.get("same")), sum(1 for v in lines if "error" in v)
    print(
        f"{result['product']:<8} {result['n']:>6}x{result['k']:<6} rows {result['rows']:>5}  "
        f"cuBLAS {result['cublas_us']:9.1f} us  reference {result['reference_us']:9.1f} us  "
        f"best {result['best_us']:9.1f} us {result['best']:<16} "
        f"({matched}/{len(lines)} matched the reference, {errors} failed)",
        flush=True,
    )


def write_table(path: Path, results: list[dict], dtype, device, arch: str) -> int:
    """Each (product, bucket)'s winner where it is not the reference; returns the entry count."""
    import torch
    import triton

    from kernels._config_table import device_name
    from kernels.invariant_matmul_configs import MatmulConfig, MatmulTable

    name = str(dtype).removeprefix("torch.")
    entries = {
        (name, r["n"], r["k"], r["rows"]): MatmulConfig.parse(r["best"])
        for r in results
        if r["best"] != r["reference"]
    }
    extra = {"torch": torch.__version__, "triton": triton.__version__, "arch": arch,
             "date": datetime.date.today().isoformat()}  # fmt: skip
    MatmulTable(device_name(device), entries).save(path, extra)
    return len(entries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--random-arch", default="llama-3.1-8b", help="engine/bench/random_arch.py name")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu (Triton's interpreter)")
    parser.add_argument(
        "--dtype", default="bfloat16", choices=["bfloat16", "float16"], help="weights and inputs"
    )
    parser.add_argument(
        "--buckets", type=int, nargs="+", help="row counts to time (default: every table bucket)"
    )
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES),
                        help="MxNxK/warps/stages tile configs besides the reference")  # fmt: skip
    parser.add_argument("--launches", type=int, default=20, help="back-to-back launches per timing")
    parser.add_argument("--replays", type=int, default=3, help="timings per config; the median counts")
    parser.add_argument("--write-table", type=Path, help="write the winners here (MatmulTable format)")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    args = parser.parse_args(argv)
    if args.device == "cpu":  # read when kernels/ defines its kernels, so before the imports below
        os.environ.setdefault("TRITON_INTERPRET", "1")

    import torch

    from kernels import _common
    from kernels.invariant_matmul_configs import ROW_BUCKETS

    buckets = args.buckets or list(ROW_BUCKETS)
    started = time.monotonic()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    previous = _common.set_mode("triton")  # CPU tensors too, through the interpreter
    results = []
    try:
        torch.manual_seed(0)
        for name, (n, k) in products(hf_config(args.random_arch)).items():
            weight = (torch.randn(n, k, device=device) * 0.02).to(dtype)
            x_all = torch.randn(max(buckets), k, device=device).to(dtype)
            for rows in buckets:
                results.append(tune_bucket(name, weight, x_all[:rows], args.candidates, args))
                print_line(results[-1])
            del weight, x_all
    finally:
        _common.set_mode(previous)
    print(f"done in {time.monotonic() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.write_table:
        count = write_table(args.write_table, results, dtype, device, args.random_arch)
        print(f"wrote {args.write_table} ({count} entries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
