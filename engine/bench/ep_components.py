"""``chassis bench ep-components``: one rank's decode step components for a DeepSeek-class MoE model
under expert parallelism with data-parallel attention, measured on one device.

Per layer, against the batch per rank (one decode token per sequence): the absorbed MLA attention at
a context length (``W_uk`` absorption, ``kernels.mla_decode`` over a paged latent cache, ``W_uv``, as
``engine.layers.latent_attention`` runs it), the attention's dense projections (q_a + kv_a, q_b,
o_proj), the layer's norms, rotary and latent write, the router and shared expert, the dense MLP
of the first layers, the LM head; against the
(token, expert) pairs a rank receives, the routed experts' grouped GEMM (``kernels.fused_moe``) over
the 256/EP local experts of one layer (random bf16 weights, one layer allocated at a time). The
dispatch/combine bytes are computed, not measured. ``engine.bench.ep_scaling`` turns the JSON into
tokens/s per GPU; docs/ep-scaling-model.md explains both.

CUDA: each timed call runs after a 256 MiB write that evicts L2 (each layer reads its own weights),
between CUDA events, as a CUDA graph replay where capture works (the engine's decode runs in
graphs), else eagerly; the median of the repeats. CPU (``--tiny``): wall clock, the torch references.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict

from engine.bench.ep_scaling import SHAPES, TINY, Assumptions, ModelShape, comm_bytes, local_experts

# torch, the kernels and the layers are imported where they run: `chassis bench` builds this
# command's parser without them.
BLOCK_SIZE = 16  # EngineConfig.block_size's default
FLUSH_BYTES = 256 << 20


class Timer:
    def __init__(self, device, warmup: int, repeats: int, graphs: bool) -> None:
        import torch

        self.device, self.warmup, self.repeats, self.graphs = device, warmup, repeats, graphs
        self.cuda = device.type == "cuda"
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=device) if self.cuda else None
        self.modes: set[str] = set()

    def ms(self, fn: Callable[[], object]) -> float:
        """Median milliseconds of ``fn()`` after the warm-up calls."""
        import torch

        for _ in range(self.warmup):
            fn()
        times = []
        if not self.cuda:
            self.modes.add("wall clock")
            for _ in range(self.repeats):
                started = time.perf_counter()
                fn()
                times.append((time.perf_counter() - started) * 1e3)
            return statistics.median(times)
        replay = self._graph(fn) if self.graphs else None
        self.modes.add("cuda graph" if replay else "eager")
        call = replay or fn
        for _ in range(self.repeats):
            self.flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    def _graph(self, fn: Callable[[], object]) -> Callable[[], object] | None:
        import torch

        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                fn()
        except Exception as e:  # a host sync or an op capture refuses: time it eagerly
            torch.cuda.synchronize(self.device)
            print(f"    (graph capture failed, eager: {type(e).__name__}: {e})", flush=True)
            return None
        return graph.replay


class Parts:
    """Builds each measured part for one batch: the inputs and weights are made here, outside the
    timing; the returned function is what is timed."""

    def __init__(self, s: ModelShape, context: int, dtype, device) -> None:
        self.s, self.context, self.dtype, self.device = s, context, dtype, device

    def randn(self, *shape: int, scale: float = 1.0):
        import torch

        t = torch.randn(*shape, dtype=self.dtype, device=self.device)
        return t.mul_(scale) if scale != 1.0 else t

    def weight(self, out_features: int, in_features: int):
        return self.randn(out_features, in_features, scale=in_features**-0.5)

    def latent_cache(self, batches: list[int]):
        """One paged latent cache for the largest batch, shared by every batch's measurement."""
        return self.randn(max(batches) * self.context // BLOCK_SIZE, BLOCK_SIZE, self.s.latent_width)

    def mla_attention(self, batch: int, cache):
        """The absorbed decode as ``LatentAttention._absorbed`` runs it: ``W_uk``, the kernel, ``W_uv``."""
        import torch

        from kernels.mla_decode import mla_decode

        s, device = self.s, self.device
        blocks = self.context // BLOCK_SIZE
        order = torch.randperm(cache.shape[0], device=device)[: batch * blocks]  # a fragmented pool
        block_tables = order.view(batch, blocks).to(torch.int32)
        seq_lens = torch.full((batch,), self.context, dtype=torch.int32, device=device)
        nope = s.qk_nope_head_dim
        w = self.randn(s.num_heads, nope + s.v_head_dim, s.kv_lora_rank, scale=s.kv_lora_rank**-0.5)
        w_uk, w_uv = w[:, :nope], w[:, nope:]
        q_nope = self.randn(batch, s.num_heads, nope)
        q_rope = self.randn(batch, s.num_heads, s.qk_rope_head_dim)
        scale = (nope + s.qk_rope_head_dim) ** -0.5

        def fn():
            q_latent = torch.einsum("thn,hnr->thr", q_nope, w_uk)
            out = mla_decode(q_latent, q_rope, cache, block_tables, seq_lens, scale)
            return torch.einsum("thr,hvr->thv", out, w_uv)

        return fn

    def attention_projections(self, batch: int):
        """q_a + kv_a (one fused GEMM, as ``MLAAttention.qkv_proj``), q_b, o_proj."""
        from torch.nn.functional import linear

        s = self.s
        qkv = self.weight(s.q_lora_rank + s.latent_width, s.hidden)
        q_b = self.weight(s.num_heads * (s.qk_nope_head_dim + s.qk_rope_head_dim), s.q_lora_rank)
        o = self.weight(s.hidden, s.num_heads * s.v_head_dim)
        x, attn_out = self.randn(batch, s.hidden), self.randn(batch, s.num_heads * s.v_head_dim)

        def fn():
            linear(linear(x, qkv)[:, : s.q_lora_rank], q_b)
            return linear(attn_out, o)

        return fn

    def layer_other(self, batch: int):
        """A layer's small ops: two residual-add norms, the q and latent norms, the rotary of q_rope
        and k_rope, the latent cache write (the kernels the engine's layers call)."""
        import torch

        from engine.layers.rotary import RotaryEmbedding
        from kernels.latent_cache_write import write_latent
        from kernels.rms_norm import fused_add_rms_norm, rms_norm

        s, device = self.s, self.device
        x, residual = self.randn(batch, s.hidden), self.randn(batch, s.hidden)
        q, c = self.randn(batch, s.q_lora_rank), self.randn(batch, s.kv_lora_rank)
        norms = {
            n: torch.ones(n, dtype=self.dtype, device=device)
            for n in {s.hidden, s.q_lora_rank, s.kv_lora_rank}
        }
        q_rope, k_rope = (
            self.randn(batch, s.num_heads, s.qk_rope_head_dim),
            self.randn(batch, 1, s.qk_rope_head_dim),
        )
        rotary = RotaryEmbedding(s.qk_rope_head_dim, self.context + 1, 10000.0, None, device, is_neox=False)
        positions = torch.full((batch,), self.context, dtype=torch.int64, device=device)
        cache = torch.zeros(batch, BLOCK_SIZE, s.latent_width, dtype=self.dtype, device=device)
        slots = torch.arange(batch, dtype=torch.int64, device=device) * BLOCK_SIZE

        def fn():
            fused_add_rms_norm(x, residual, norms[s.hidden], 1e-6)
            rms_norm(q, norms[s.q_lora_rank], 1e-6)
            latent = rms_norm(c, norms[s.kv_lora_rank], 1e-6)
            _, k = rotary(positions, q_rope, k_rope)
            write_latent(cache, slots, latent, k.squeeze(1))
            return fused_add_rms_norm(x, residual, norms[s.hidden], 1e-6)

        return fn

    def router(self):
        """The engine's router with DeepSeek-V3's settings: fp32 gate, sigmoid, group-limited top-k."""
        from engine.checkpoint.moe_config import MoEConfig
        from engine.layers.router import Router

        s = self.s
        moe = MoEConfig(
            num_experts=s.routed_experts, top_k=s.top_k, intermediate_size=s.moe_intermediate,
            moe_layers=(False,) * s.first_dense + (True,) * s.moe_layers, scoring="sigmoid",
            num_groups=s.expert_groups, topk_groups=s.topk_groups, group_score="top2_sum",
            score_correction_bias=True, shared_intermediate_size=s.shared_experts * s.moe_intermediate,
        )  # fmt: skip
        router = Router(s.hidden, moe, self.device)
        router.weight.normal_(std=s.hidden**-0.5)
        return router

    def swiglu(self, batch: int, inter: int, router=None):
        """A SwiGLU MLP (the shared expert after the router, or a dense layer's MLP)."""
        from torch.nn.functional import linear, silu

        w13, w2 = self.weight(2 * inter, self.s.hidden), self.weight(self.s.hidden, inter)
        x = self.randn(batch, self.s.hidden)

        def fn():
            if router is not None:
                router(x)
            h = linear(x, w13)
            return linear(silu(h[:, :inter]) * h[:, inter:], w2)

        return fn

    def lm_head(self, batch: int):
        from torch.nn.functional import linear

        w, x = self.weight(self.s.vocab, self.s.hidden), self.randn(batch, self.s.hidden)
        return lambda: linear(x, w)

    def local_experts(self, ep: int):
        """One MoE layer's ``256 / EP`` experts, ``w13 [E, 2I, H]`` and ``w2 [E, H, I]``."""
        s, experts = self.s, local_experts(self.s, ep)
        w13 = self.randn(experts, 2 * s.moe_intermediate, s.hidden, scale=s.hidden**-0.5)
        return w13, self.randn(experts, s.hidden, s.moe_intermediate, scale=s.moe_intermediate**-0.5)

    def routed(self, pairs: int, experts):
        """``pairs`` received (token, expert) rows spread evenly over the local experts, one row per
        pair: the expert GEMMs' work is per pair, whichever token a pair came from."""
        import torch

        from kernels.fused_moe import fused_moe

        (w13, w2), device = experts, self.device
        ids = (torch.randperm(pairs, device=device) % w13.shape[0]).view(pairs, 1).to(torch.int32)
        weights = torch.ones(pairs, 1, dtype=torch.float32, device=device)
        x = self.randn(pairs, self.s.hidden)
        return lambda: fused_moe(x, w13, w2, weights, ids)


def measure(args: argparse.Namespace) -> dict:
    import torch

    s = TINY if args.tiny else SHAPES[args.shape]
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    context, batches = args.context, sorted(args.batch)
    if context % BLOCK_SIZE:
        raise SystemExit(f"--context must be a multiple of {BLOCK_SIZE}")
    timer, parts = Timer(device, args.warmup, args.repeats, args.graphs), Parts(s, context, dtype, device)
    started = time.perf_counter()

    def table(name: str, make: Callable[[int], Callable], xs: list[int], key: str = "batch", **extra):
        rows = []
        for x in xs:
            ms = timer.ms(make(x))
            rows.append({**extra, key: x, "ms": ms})
            labels = " ".join(f"{k}={v}" for k, v in {**extra, key: x}.items())
            print(f"[{time.perf_counter() - started:6.1f} s] {name} {labels}: {ms:.4f} ms", flush=True)
        return rows

    attention = functools.partial(parts.mla_attention, cache=parts.latent_cache(batches))
    tables = {"mla_attention": table("mla_attention", attention, batches)}
    tables["attention_projections"] = table("attention_projections", parts.attention_projections, batches)
    tables["layer_other"] = table("layer_other", parts.layer_other, batches)
    router, shared = parts.router(), s.shared_experts * s.moe_intermediate
    tables["shared_expert"] = table("shared_expert", lambda b: parts.swiglu(b, shared, router), batches)
    tables["dense_mlp"] = table("dense_mlp", lambda b: parts.swiglu(b, s.dense_intermediate), batches)
    tables["lm_head"] = table("lm_head", parts.lm_head, batches)
    # Pairs a rank receives: batch * top_k on average (under uniform routing every rank receives what
    # it sends), and twice the largest for the imbalance and MTP's two rows per sequence.
    pairs = sorted({b * s.top_k for b in batches} | {2 * max(batches) * s.top_k})
    tables["routed_experts"] = []
    for ep in args.ep:  # one layer's local experts at a time
        routed = functools.partial(parts.routed, experts=parts.local_experts(ep))
        tables["routed_experts"] += table(
            "routed_experts", routed, pairs, key="pairs", ep=ep, local_experts=local_experts(s, ep)
        )
    tables["dispatch_combine"] = comm_table(s, args.ep, batches)
    cuda = device.type == "cuda"
    ceilings = None
    if cuda:  # the anchors of this run: what the components' byte and FLOP floors divide by
        from engine.bench.floors import measure_ceilings

        c = measure_ceilings(str(device))
        ceilings = {"copy_bytes_per_s": c.copy_bytes_per_s, "matmul_flops_per_s": c.matmul_flops_per_s}
        print(
            f"copy {c.copy_bytes_per_s / 1e12:.2f} TB/s, matmul {c.matmul_flops_per_s / 1e12:.0f} TFLOP/s",
            flush=True,
        )
    return {
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "device_total_memory_bytes": torch.cuda.get_device_properties(device).total_memory if cuda else 0,
        "torch": torch.__version__,
        "triton": _triton_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "dtype": args.dtype,
        "shape": asdict(s),
        "context": context,
        "block_size": BLOCK_SIZE,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "timing": sorted(timer.modes),
        "seconds": round(time.perf_counter() - started, 1),
        "ceilings": ceilings,
        "tables": tables,
    }


def comm_table(s: ModelShape, eps: list[int], batches: list[int]) -> list[dict]:
    """Computed, not measured: one rank's dispatch (FP8 + scales) and combine (BF16) bytes per MoE
    layer with uniform routing, by link (the defaults of ``ep_scaling.Assumptions``)."""
    a = Assumptions()
    rows = []
    for ep in eps:
        for b in batches:
            c = comm_bytes(s, ep, b * s.top_k, a)
            rows.append(
                {"ep": ep, "batch": b, "pairs": b * s.top_k, "dispatch_nvlink": c.dispatch_nvlink,
                 "dispatch_rdma": c.dispatch_rdma, "combine_nvlink": c.combine_nvlink,
                 "combine_rdma": c.combine_rdma, "per_step": c.total * s.moe_layers}
            )  # fmt: skip
    return rows


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", choices=sorted(SHAPES), default="deepseek-v3", help="default: %(default)s")
    parser.add_argument("--tiny", action="store_true", help="the tiny shape on small defaults (a CPU test)")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--dtype", default="bfloat16", help="default: %(default)s")
    parser.add_argument(
        "--context", type=int, default=None, help="KV length per sequence (default: 4096; tiny 64)"
    )
    parser.add_argument(
        "--batch",
        type=int,
        nargs="+",
        default=None,
        help="batches per rank (default: 16 32 64 128 256 512 1024; tiny 2 4)",
    )
    parser.add_argument(
        "--ep",
        type=int,
        nargs="+",
        default=None,
        help="EP sizes for the routed GEMM (default: 8 32 64; tiny 2 4)",
    )
    parser.add_argument("--warmup", type=int, default=None, help="calls before timing (default: 5; tiny 1)")
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed calls, median kept (default: 20; tiny 3)"
    )
    parser.add_argument(
        "--no-graphs", dest="graphs", action="store_false", help="time eagerly, no CUDA graphs"
    )
    parser.add_argument("--json", metavar="OUT", default=None, help="write the tables as JSON to OUT")


def _defaults(args: argparse.Namespace) -> argparse.Namespace:
    tiny = args.tiny
    for name, full, small in (
        ("context", 4096, 64), ("batch", [16, 32, 64, 128, 256, 512, 1024], [2, 4]), ("ep", [8, 32, 64], [2, 4]),
        ("warmup", 5, 1), ("repeats", 20, 3),
    ):  # fmt: skip
        if getattr(args, name) is None:
            setattr(args, name, small if tiny else full)
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() and not tiny else "cpu"
    if tiny and args.dtype == "bfloat16" and args.device == "cpu":
        args.dtype = "float32"
    return args


def run(args: argparse.Namespace) -> int:
    data = measure(_defaults(args))
    print(
        f"{data['shape']['name']} on {data['device']}: {data['seconds']} s, timing {', '.join(data['timing'])}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine.bench.ep_components",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
