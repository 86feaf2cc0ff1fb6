"""What each piece of an eager prefill step costs the host, against the GPU time of the same piece
(issue 16: DeepSeek-V2-Lite's prefill of 2,048 tokens runs ~31 ms of kernels in a ~55 ms wall).

Builds ``--arch`` with random weights as the benchmark does, then for each piece at ``--tokens`` rows:
``issue``, the host's microseconds per call with nothing waited for (the GPU runs behind it), and
``gpu``, the device's microseconds per call from a CUDA graph of it (no launch gaps). A piece whose
issue time exceeds its GPU time starves the device in an eager step. Pieces: one MoE block, the
norm + fused input projection, ``F.linear`` at the step's shapes (also with cuBLASLt preferred),
the causal attention through SDPA's cuDNN, flash (values padded to the key width) and
memory-efficient backends, one Triton launch and one torch op, and the MoE block as one graph replay.

    python3 scripts/gpu/probe_prefill_host.py --arch deepseek-v2-lite --tokens 2048
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arch", default="deepseek-v2-lite")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from engine import LLM
    from engine.bench.random_arch import write_config_dir
    from engine.graph_timing import capture, time_in_graph
    from engine.layers.moe import MoE
    from kernels.rms_norm import rms_norm

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_config_dir(args.arch, Path(tmp) / "m")
        llm = LLM(str(model_dir), device="cuda", dtype="bfloat16", load_format="dummy",
                  max_num_seqs=256, max_num_batched_tokens=8192, gpu_memory_utilization=0.85)  # fmt: skip
        model = llm.engine.runner.model
        layer = next(layer for layer in model.layers if isinstance(layer.mlp, MoE))
        cfg = json.loads((model_dir / "config.json").read_text())
        t, hidden = args.tokens, cfg["hidden_size"]
        heads = cfg["num_attention_heads"]
        x = torch.randn(t, hidden, device="cuda", dtype=torch.bfloat16)
        residual = torch.randn_like(x)
        qkv_weight = layer.self_attn.qkv_proj.weight
        qk_dim = cfg.get("qk_nope_head_dim", 128) + cfg.get("qk_rope_head_dim", 64)
        v_dim = cfg.get("v_head_dim", 128)
        q = torch.randn(1, heads, t, qk_dim, device="cuda", dtype=torch.bfloat16)
        k = torch.randn_like(q)
        v = torch.randn(1, heads, t, v_dim, device="cuda", dtype=torch.bfloat16)
        v_padded = F.pad(v, (0, qk_dim - v_dim))
        norm_weight = layer.input_layernorm.weight

        def sdpa(backend, values):
            def run():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, values, is_causal=True)

            return run

        def with_lt(fn):
            def run():
                before = torch.backends.cuda.preferred_blas_library()
                torch.backends.cuda.preferred_blas_library("cublaslt")
                try:
                    return fn()
                finally:
                    torch.backends.cuda.preferred_blas_library(before)

            return run

        pieces = {
            "moe block (router, align, experts, shared)": lambda: layer.mlp(x),
            "norm + fused input projection": lambda: layer.input_layernorm.norm_matmul(
                x, residual, qkv_weight
            ),
            f"F.linear {t}x{hidden} -> {qkv_weight.shape[0]}": lambda: F.linear(x, qkv_weight),
            f"F.linear {t}x{hidden} -> {qkv_weight.shape[0]}, cuBLASLt": with_lt(
                lambda: F.linear(x, qkv_weight)
            ),
            "sdpa causal, cuDNN": sdpa(SDPBackend.CUDNN_ATTENTION, v),
            "sdpa causal, flash, values padded": sdpa(SDPBackend.FLASH_ATTENTION, v_padded),
            "sdpa causal, memory-efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION, v),
            "one Triton launch (rms_norm)": lambda: rms_norm(x, norm_weight, 1e-6),
            "one torch op (add)": lambda: x + residual,
        }
        rows = {}
        for name, fn in pieces.items():
            try:
                gpu_us = time_in_graph(lambda _i, fn=fn: fn(), args.calls, 5)
                rows[name] = {"issue_us": _issue_us(fn, args.calls), "gpu_us": gpu_us}
            except Exception as error:  # a backend this build or shape does not take
                rows[name] = {"error": f"{type(error).__name__}: {str(error)[:120]}"}
        moe_block = pieces["moe block (router, align, experts, shared)"]
        graph = capture(lambda _i: moe_block(), 1)
        rows["moe block as one graph replay"] = {"issue_us": _issue_us(graph.replay, args.calls)}
        print(f"{args.arch}, {t} tokens: host issue time vs GPU time per call (us)")
        for name, row in rows.items():
            if "error" in row:
                print(f"  {name:55s} {row['error']}")
            else:
                gpu = row.get("gpu_us")
                print(
                    f"  {name:55s} issue {row['issue_us']:8.1f}   gpu {gpu if gpu is None else round(gpu, 1)}"
                )
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    return 0


def _issue_us(fn, calls: int) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        fn()
    issued = time.perf_counter() - started
    torch.cuda.synchronize()
    return issued / calls * 1e6


if __name__ == "__main__":
    sys.exit(main())
