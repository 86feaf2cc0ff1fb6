"""Which tile configs of the invariant GEMM give the same bits per row, and what each costs (issue 20).

Batch invariance needs every row's products and fp32 sums to be the same whatever the row count. The
engine's invariant GEMM (``kernels/invariant_matmul.py``) gets that by one reference tile config per weight.
If several configs give bitwise the same rows (the same MMA instruction, its K steps chained in the
same order), the engine may pick among them by row count and stay invariant. This script finds out,
on the GPU it runs on: for each Llama-3.1-8B product it computes ``--rows`` rows with the default
config as the reference, then every candidate at each row count, and prints per candidate whether
every row matched the reference bit for bit and its microseconds against cuBLAS.

Candidates are ``MxNxK/warps/stages`` tiles of the same kernel; ``swap:`` candidates run the kernel
with the roles of weight and activations swapped (``W @ x.T``, the weight rows as the MMA's M).

    python3 scripts/gpu/probe_invariant_gemm.py --json "$OUT/probe_invariant_gemm.json"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# Llama-3.1-8B's products (N, K): q/k/v, o, gate/up, down, LM head.
SHAPES = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096))
ROWS = (1, 5, 64, 200, 2048)
CANDIDATES = (
    "64x16x128/4/4",
    "64x32x256/4/3",
    "64x64x64/4/4",
    "64x128x64/4/4",
    "64x256x64/8/3",
    "128x64x64/4/4",
    "128x128x64/8/3",
    "128x256x64/8/3",
    "16x32x128/4/4",
    "16x64x256/4/3",
    "32x64x128/4/4",
    "swap:64x16x128/4/4",
    "swap:64x16x256/4/3",
    "swap:128x16x128/4/4",
    "swap:64x32x128/4/4",
)


def parse(spec: str):
    from kernels.invariant_matmul import MatmulConfig

    swap = spec.startswith("swap:")
    tiles, warps, stages = spec.removeprefix("swap:").split("/")
    m, n, k = (int(v) for v in tiles.split("x"))
    return swap, MatmulConfig(m, n, k, num_warps=int(warps), num_stages=int(stages))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES))
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import torch

    from kernels.invariant_matmul import invariant_matmul
    from kernels.invariant_matmul_configs import reference_config

    def timed(fn) -> float:
        for _ in range(2):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / args.reps * 1e3

    def run(spec, x, weight):
        swap, config = parse(spec)
        if swap:
            return invariant_matmul(weight, x, config=config).t()
        return invariant_matmul(x, weight, config=config)

    torch.manual_seed(0)
    results: dict = {}
    for n, k in SHAPES:
        weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        x_all = torch.randn(max(args.rows), k, device="cuda", dtype=torch.bfloat16)
        reference = invariant_matmul(x_all, weight)
        for rows in args.rows:
            x = x_all[:rows].contiguous()
            line = {"cublas_us": timed(lambda x=x, w=weight: torch.nn.functional.linear(x, w)),
                    "default_us": timed(lambda x=x, w=weight: invariant_matmul(x, w))}  # fmt: skip
            default_same = torch.equal(invariant_matmul(x, weight), reference[:rows])
            line["default_same"] = default_same
            for spec in args.candidates:
                try:
                    out = run(spec, x, weight)
                    same = torch.equal(out, reference[:rows])
                    us = timed(lambda s=spec, x=x, w=weight: run(s, x, w))
                    line[spec] = {"same": same, "us": us}
                except Exception as error:  # a tile the compiler refuses: said, and the sweep goes on
                    line[spec] = {"error": f"{type(error).__name__}: {str(error)[:160]}"}
            results[f"{n}x{k} M={rows}"] = line
            cells = "  ".join(
                f"{spec} {'=' if v.get('same') else ('ERR' if 'error' in v else 'DIFF')}{v.get('us', 0):.1f}"
                for spec, v in line.items()
                if isinstance(v, dict)
            )
            print(
                f"{n:>6}x{k:<5} M={rows:<5} cublas {line['cublas_us']:.1f} default({reference_config(n, k).block_n}) "
                f"{'=' if default_same else 'DIFF'}{line['default_us']:.1f} | {cells}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
