#!/usr/bin/env python3
"""Decode-step kernels at the Llama-3.1-8B shape on one GPU, timed the way decode runs: in CUDA graphs.

(a) device-to-device copy bandwidth, the reference every other rate is compared with;
(b) cuBLAS (``F.linear``) against every candidate Triton GEMV config for the decode products at
    M = 1, 2, 4, 8 (the down projection also as the SwiGLU-fused GEMV against silu_and_mul + cuBLAS);
(c) today's rotary + ``v.contiguous()`` + KV-cache write against the fused ``rope_and_write_kv``;
(d) every timed kernel checked against its torch reference on the GPU; exit status 1 on a mismatch;
(e) residual add + RMSNorm folded into the GEMV (``gemv_norm``) for the products a norm precedes
    (qkv, gate_up, lm_head) against the norm kernel + the GEMV or cuBLAS this run picked, trying the
    plain sweep's three fastest configs (the same weight stream, so the same tiles tend to win);
(f) split merges in a second kernel against the last split program merging them (``FUSED_REDUCE``)
    for batch-1 decode attention (context 1150) and the SwiGLU down projection at the table's
    config: per-layer time and per-step saving, and the two must give the same bits (exit 1 if not).
    ``--reduce-only`` runs just this (~15 s).

Each timing captures ``--calls`` back-to-back calls in one graph, replays it and divides. Weights
rotate through enough copies to exceed L2 (50 MB on an H200), as 32 layers' weights do in decode.
Needs only torch and triton. ``--write-table kernels/gemv_table.json`` saves the fastest config per
shape (and whether it beat cuBLAS) for ``CHASSIS_GEMV=auto|triton`` to use; ``normed`` entries say
whether the fused norm beat the separate one ("triton") or not ("cublas": keep the norm kernel).

    python scripts/gpu/bench_decode_kernels.py --write-table kernels/gemv_table.json
    python scripts/gpu/bench_decode_kernels.py --reduce-only
    python scripts/gpu/bench_decode_kernels.py --tp 2 --write-table kernels/gemv_table.json  # TP shards
    python scripts/gpu/bench_decode_kernels.py --arch deepseek-v2-lite --arch qwen3-30b-a3b \
        --write-table kernels/gemv_table.json  # (b) only, at these models' dense products, merged in

``--arch`` takes ``engine.bench.random_arch`` names: the dense decode products of those models (attention
projections, dense and shared-expert MLPs, LM head; the routed experts have their own kernels,
``scripts/gpu/tune_moe.py``), and (e) for the ones a norm precedes (the fused input projection, the
dense MLP's gate/up, the LM head), whose ``normed`` entries the plain ones' tiles serve until then.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from engine.graph_timing import time_in_graph  # noqa: E402

LAYERS, Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 32, 8, 128, 16
SHAPES = [  # name, N, K, gated (input [M, 2K] through silu_and_mul)
    ("qkv", 6144, 4096, False),
    ("o_proj", 4096, 4096, False),
    ("gate_up", 28672, 4096, False),
    ("down", 4096, 14336, False),
    ("down+silu", 4096, 14336, True),
    ("lm_head", 128256, 4096, False),
]


def arch_shapes(arch: str) -> tuple[list[tuple[str, int, int, bool]], int]:
    """The dense decode products of a ``random_arch`` model (named ``<arch>:<product>``), and its layer
    count: the attention's fused input projection (MLA: q or q_a stacked with kv_a; else q/k/v) and
    q_b (MLA with q-LoRA), o_proj, the dense and shared-expert SwiGLU MLPs, the LM head."""
    from engine.bench.random_arch import hf_config

    cfg = hf_config(arch)
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    shapes = []
    if "kv_lora_rank" in cfg:
        q_dim = heads * (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"])
        latent = cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]
        q_lora = cfg.get("q_lora_rank")
        shapes.append(("qkv", (q_lora or q_dim) + latent, hidden, False))
        if q_lora:
            shapes.append(("q_b", q_dim, q_lora, False))
        shapes.append(("o_proj", hidden, heads * cfg["v_head_dim"], False))
    else:
        head_dim = cfg.get("head_dim") or hidden // heads
        shapes.append(("qkv", (heads + 2 * cfg["num_key_value_heads"]) * head_dim, hidden, False))
        shapes.append(("o_proj", hidden, heads * head_dim, False))
    mlps = []
    if cfg.get("first_k_dense_replace") or not (cfg.get("n_routed_experts") or cfg.get("num_experts")):
        mlps.append(("mlp", cfg["intermediate_size"]))
    if cfg.get("n_shared_experts"):
        mlps.append(("shared", cfg["n_shared_experts"] * cfg["moe_intermediate_size"]))
    for name, inter in mlps:
        shapes += [(f"{name}_gate_up", 2 * inter, hidden, False), (f"{name}_down+silu", hidden, inter, True)]
    shapes.append(("lm_head", cfg["vocab_size"], hidden, False))
    return [(f"{arch}:{name}", n, k, gated) for name, n, k, gated in shapes], cfg["num_hidden_layers"]


def shard_shapes(tp: int) -> list[tuple[str, int, int, bool]]:
    """``SHAPES`` as one rank of ``tp`` holds them: column-parallel products (qkv, gate_up, the LM head's
    vocab rows, padded to a multiple of ``tp``) split N, row-parallel ones (o_proj, down) split K."""
    if tp == 1:
        return SHAPES
    row_parallel = ("o_proj", "down", "down+silu")
    return [
        (name, n, k // tp, gated) if name in row_parallel else (name, -(-n // tp), k, gated)
        for name, n, k, gated in SHAPES
    ]


NORMED = ("qkv", "gate_up", "lm_head")  # products an RMSNorm precedes in a decoder layer / the model
NORMED_TRIES = 3  # plain-sweep configs tried per fused shape (1 once the time budget is spent)
EPS = 1e-5
ROWS = (1, 2, 4, 8)
ROTATE_BYTES = 256 << 20  # weights cycled through per graph: 5x an H200's L2
TRITON_MARGIN = 0.98  # the table picks Triton only when it is >= 2 % faster, so noise does not flip ties
DTYPE = torch.bfloat16
DEVICE = torch.device("cuda")


@dataclass
class Timing:
    label: str
    us: float
    bytes_moved: int
    ok: bool = True

    def rate(self) -> float:
        return self.bytes_moved / self.us / 1e3  # GB/s


def copy_bandwidth(replays: int) -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device=DEVICE).random_()
    dst = torch.empty_like(src)
    us = time_in_graph(lambda i: dst.copy_(src), 5, replays)
    return 2 * (1 << 30) / us / 1e3  # read + write


def close(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    return torch.allclose(actual.float(), expected.float(), atol=2e-2, rtol=2e-2)


def bench_rope(calls: int, replays: int, failures: list[str]) -> list[tuple[int, float, float]]:
    from kernels.rotary import build_cos_sin_cache

    cos_sin = build_cos_sin_cache(HEAD_DIM, 8192, 500000.0, None, DEVICE)
    caches = [torch.randn(1024, BLOCK_SIZE, KV_HEADS, HEAD_DIM, device=DEVICE, dtype=DTYPE) for _ in range(6)]
    rows = []
    for tokens in (1, 2, 4, 8, 300):  # 300: the prefill-sized tiling, checked but not timed
        old_us, new_us = _rope_case(tokens, cos_sin, caches, calls if tokens <= 8 else 0, replays, failures)
        if tokens <= 8:
            rows.append((tokens, old_us, new_us))
    return rows


def _rope_case(tokens, cos_sin, caches, calls, replays, failures) -> tuple[float, float]:
    from kernels.kv_cache_write import write_kv_cache
    from kernels.rope_kv_write import rope_and_write_kv, rope_and_write_kv_torch
    from kernels.rotary import rotary_embedding

    qkv = torch.randn(tokens, (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM, device=DEVICE, dtype=DTYPE)
    q, k, v = (
        t.view(tokens, -1, HEAD_DIM)
        for t in qkv.split([Q_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], -1)
    )
    positions = torch.randint(0, 8192, (tokens,), device=DEVICE)
    slots = torch.randperm(caches[0].shape[0] * BLOCK_SIZE, device=DEVICE)[:tokens]
    slots[1::3] = -1

    def old(i, kc=caches[0], vc=caches[1]):
        q_rot, k_rot = rotary_embedding(positions, q, k, cos_sin)
        write_kv_cache(k_rot, v.contiguous(), kc, vc, slots)
        return q_rot, k_rot

    def new(i, kc=caches[2], vc=caches[3], return_kv=False):
        return rope_and_write_kv(positions, q, k, v, cos_sin, kc, vc, slots, return_kv=return_kv)

    for cache in caches[1:]:
        cache.copy_(caches[0])
    q_old, k_old = old(0)
    q_new, k_new, v_new = new(0, return_kv=True)
    q_ref, _, _ = rope_and_write_kv_torch(positions, q, k, v, cos_sin, caches[4], caches[5], slots)
    identical = torch.equal(q_new, q_old) and torch.equal(k_new, k_old) and torch.equal(v_new, v)
    identical = identical and torch.equal(caches[2], caches[0]) and torch.equal(caches[3], caches[1])
    if not identical:
        failures.append(f"rope_and_write_kv T={tokens}: not bit-identical to rotary + write_kv_cache")
    if not (close(q_new, q_ref) and close(caches[2], caches[4]) and torch.equal(caches[3], caches[5])):
        failures.append(f"rope_and_write_kv T={tokens}: differs from the torch reference")
    if not calls:
        return 0.0, 0.0
    return time_in_graph(old, calls, replays), time_in_graph(new, calls, replays)


def gemv_timings(name, n, k, gated, rows, args, copy_gbs, failures, deadline):
    """cuBLAS and every candidate config for one shape; returns (cublas Timing, [(config, Timing)])."""
    from kernels._common import num_compute_units
    from kernels.activation import silu_and_mul
    from kernels.gemv import gemv, gemv_silu, gemv_silu_torch, gemv_torch
    from kernels.gemv_configs import candidate_configs, default_config

    device = DEVICE
    w_bytes = n * k * 2
    copies = max(1, min(args.calls, -(-ROTATE_BYTES // w_bytes)))
    weights = [(torch.randn(n, k, device=device) / k**0.5).to(DTYPE) for _ in range(copies)]
    x = torch.randn(rows, 2 * k if gated else k, device=device, dtype=DTYPE)
    moved = w_bytes + x.numel() * 2 + rows * n * 2
    reference = (gemv_silu_torch if gated else gemv_torch)(x, weights[0])

    def cublas(i):
        return F.linear(silu_and_mul(x) if gated else x, weights[i % copies])

    base = Timing("cuBLAS" + (" + silu_and_mul" if gated else ""), 0.0, moved)
    base.ok = close(cublas(0), reference)
    base.us = time_in_graph(cublas, args.calls, args.replays)
    results = []
    sms = num_compute_units(device)
    default = default_config(rows, n, k, sms)
    op = gemv_silu if gated else gemv
    skipped = 0
    for config in candidate_configs(rows, n, k, sms):
        if time.monotonic() > deadline and config != default:
            skipped += 1
            continue
        label = config.label() + (" *" if config == default else "")
        try:
            first = op(x, weights[0], config=config)
            ok = close(first, reference) and torch.equal(first, op(x, weights[0], config=config))
            us = time_in_graph(
                lambda i, c=config: op(x, weights[i % copies], config=c), args.calls, args.replays
            )
        except Exception as exc:  # a config the GPU cannot run (resources): report, keep going
            print(f"    {label:<34} failed: {type(exc).__name__}: {str(exc)[:80]}")
            continue
        results.append((config, Timing(label, us, moved, ok)))
        if not ok:
            failures.append(f"gemv {name} M={rows} {config.label()}: differs from the torch reference")
    if not base.ok:
        failures.append(f"cuBLAS {name} M={rows}: differs from the torch reference")
    budget_note = f", {skipped} configs skipped: time budget" if skipped else ""
    print(f"  {name} N={n} K={k} M={rows}  ({copies} weight copies{budget_note})")
    for t in [base] + [t for _, t in sorted(results, key=lambda r: r[1].us)]:
        mark = "" if t.ok else "  MISMATCH"
        print(
            f"    {t.label:<34} {t.us:9.2f} us {t.rate():7.0f} GB/s {100 * t.rate() / copy_gbs:5.1f} %{mark}"
        )
    return base, results


def _normed(name: str) -> bool:
    """Whether a norm precedes this product in decode (Llama's, or an ``--arch`` model's own: its
    attention input, its dense first layer's gate/up, its LM head)."""
    product = name.rsplit(":", 1)[-1]
    return product in NORMED or product == "mlp_gate_up"


def normed_timings(name, n, k, rows, base, results, args, failures, deadline):
    """The norm-fused GEMV against fused_add_rms_norm + this run's faster plain product, for the
    fastest plain configs; returns (separate Timing, [(config, Timing)])."""
    from kernels.gemv import gemv
    from kernels.gemv_norm import gemv_norm, gemv_norm_torch
    from kernels.rms_norm import fused_add_rms_norm

    w_bytes = n * k * 2
    copies = max(1, min(args.calls, -(-ROTATE_BYTES // w_bytes)))
    weights = [(torch.randn(n, k, device=DEVICE) / k**0.5).to(DTYPE) for _ in range(copies)]
    x, residual = (torch.randn(rows, k, device=DEVICE, dtype=DTYPE) for _ in range(2))
    norm_weight = (1 + 0.1 * torch.randn(k, device=DEVICE)).to(DTYPE)
    moved = w_bytes + 4 * x.numel() * 2 + rows * n * 2
    reference, _ = gemv_norm_torch(x, residual, norm_weight, EPS, weights[0])
    _, new_residual = fused_add_rms_norm(x, residual, norm_weight, EPS)  # h: the same bits, asked
    ranked = sorted(results, key=lambda r: r[1].us)
    # The separate path as this run's table would run it: the Triton GEMV only where it won.
    plain_best = ranked[0][0] if _picks_triton(base, ranked[0][1]) else None

    def separate(i):
        normed, _ = fused_add_rms_norm(x, residual, norm_weight, EPS)
        w = weights[i % copies]
        return gemv(normed, w, config=plain_best) if plain_best is not None else F.linear(normed, w)

    label = "rms_norm + " + (plain_best.label() if plain_best is not None else "cuBLAS")
    sep = Timing(
        label, time_in_graph(separate, args.calls, args.replays), moved, close(separate(0), reference)
    )
    if not sep.ok:
        failures.append(f"{label} {name} M={rows}: differs from the torch reference")
    fused = []
    for config, _ in ranked[: NORMED_TRIES if time.monotonic() < deadline else 1]:
        try:
            first, h = gemv_norm(x, residual, norm_weight, EPS, weights[0], config=config)
            again = gemv_norm(x, residual, norm_weight, EPS, weights[0], config=config)
            ok = close(first, reference) and torch.equal(h, new_residual)
            ok = ok and torch.equal(first, again[0]) and torch.equal(h, again[1])
            us = time_in_graph(
                lambda i, c=config: gemv_norm(x, residual, norm_weight, EPS, weights[i % copies], config=c),
                args.calls,
                args.replays,
            )
        except Exception as exc:  # a config the GPU cannot run (resources): report, keep going
            print(f"    norm+{config.label():<33} failed: {type(exc).__name__}: {str(exc)[:80]}")
            continue
        fused.append((config, Timing("norm+" + config.label(), us, moved, ok)))
        if not ok:
            failures.append(f"gemv_norm {name} M={rows} {config.label()}: differs from the torch reference")
    print(f"  {name} + norm N={n} K={k} M={rows}")
    for t in [sep] + [t for _, t in sorted(fused, key=lambda r: r[1].us)]:
        print(f"    {t.label:<38} {t.us:9.2f} us{'' if t.ok else '  MISMATCH'}")
    return sep, fused


def bench_fused_reduce(replays: int, failures: list[str]) -> list[tuple[str, float, float]]:
    """(label, separate-merge us, fused-merge us) per layer call; 32 calls per graph, one per layer's
    KV cache or one of 3 rotating weights, so nothing stays in L2 from one call to the next."""
    from kernels import gemv as gemv_module
    from kernels import paged_attention_decode as pad
    from kernels._arrival_counters import arrival_counters
    from kernels.gemv_configs import choose_config

    context, capacity_blocks = 1150, 512  # an 8192-token block table, as the engine's graphs have
    blocks = -(-context // BLOCK_SIZE)
    caches = [
        torch.randn(2, blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM, device=DEVICE, dtype=DTYPE)
        for _ in range(LAYERS)
    ]
    block_tables = torch.zeros(1, capacity_blocks, dtype=torch.int32, device=DEVICE)
    block_tables[0, :blocks] = torch.randperm(blocks, device=DEVICE, dtype=torch.int32)
    seq_lens = torch.tensor([context], dtype=torch.int32, device=DEVICE)
    q = torch.randn(1, Q_HEADS, HEAD_DIM, device=DEVICE, dtype=DTYPE)
    splits = pad.choose_num_splits(1, KV_HEADS, capacity_blocks * BLOCK_SIZE, DEVICE)

    def attention(i, fused):
        kv = caches[i % LAYERS]
        return pad._launch(q, kv[0], kv[1], block_tables, seq_lens, HEAD_DIM**-0.5, None, None, fused)

    n, k = 4096, 14336
    config = choose_config(1, n, k, True, DEVICE)
    weights = [(torch.randn(n, k, device=DEVICE) / k**0.5).to(DTYPE) for _ in range(3)]
    gate_up = torch.randn(1, 2 * k, device=DEVICE, dtype=DTYPE)

    def down(i, fused):
        return gemv_module._launch(gate_up, weights[i % 3], None, True, config, fused)

    rows = []
    for label, op in ((f"decode attention B=1 ctx={context} splits={splits}", attention),
                      (f"down+silu M=1 {config.label()}", down)):  # fmt: skip
        separate = [op(i, False) for i in range(3)]
        us_separate = time_in_graph(lambda i, op=op: op(i, False), LAYERS, replays)
        us_fused = time_in_graph(lambda i, op=op: op(i, True), LAYERS, replays)
        # After eager calls and graph replays alike, the counters must be back at zero and the
        # fused merge must still give the separate one's bits.
        fused = [op(i, True) for i in range(3)]
        if not all(torch.equal(a, b) for a, b in zip(separate, fused, strict=True)):
            failures.append(f"{label}: fused merge is not bit-identical to the separate reduce kernel")
        if arrival_counters(DEVICE, 1).any():
            failures.append(f"{label}: arrival counters not back at zero")
        rows.append((label, us_separate, us_fused))
    return rows


def report_fused_reduce(replays: int, failures: list[str]) -> None:
    print("(f) split merge: separate reduce kernel vs last program merges (per layer, in a 32-call graph)")
    for label, us_separate, us_fused in bench_fused_reduce(replays, failures):
        saved = LAYERS * (us_separate - us_fused)
        print(f"    {label:<44} separate {us_separate:6.2f} us  fused {us_fused:6.2f} us  "
              f"({saved:+.1f} us per step)")  # fmt: skip
    print(flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write-table", type=Path, help="save the per-shape best configs as JSON here")
    parser.add_argument("--calls", type=int, default=20, help="calls captured per graph (default 20)")
    parser.add_argument("--replays", type=int, default=5, help="graph replays per timing; the median counts")
    parser.add_argument("--budget-s", type=float, default=130.0, help="stop trying configs after this long")
    parser.add_argument("--reduce-only", action="store_true", help="run only (f), the split-merge comparison")
    parser.add_argument(
        "--tp",
        type=int,
        default=1,
        help="time only (b), at the shapes one rank of this tensor-parallel size holds; --write-table then "
        "adds those entries to the table already there",
    )
    parser.add_argument(
        "--arch",
        action="append",
        help="time only (b), at this random_arch model's dense decode products (repeatable); --write-table "
        "then adds those entries to the table already there",
    )
    args = parser.parse_args(argv)
    shapes = shard_shapes(args.tp)
    if args.arch:
        shapes = [shape for arch in args.arch for shape in arch_shapes(arch)[0]]
    only_products = args.tp > 1 or bool(args.arch)
    if not torch.cuda.is_available():
        print("error: no CUDA device visible", file=sys.stderr)
        return 2
    import triton

    from kernels.gemv_configs import GemvTable, TableEntry

    started = time.monotonic()
    deadline = started + args.budget_s
    device_name = torch.cuda.get_device_name()
    print(f"device: {device_name}  torch {torch.__version__}  triton {triton.__version__}", flush=True)
    failures: list[str] = []
    if args.reduce_only:
        with torch.inference_mode():
            report_fused_reduce(max(args.replays, 20), failures)
        for failure in failures:
            print(f"MISMATCH: {failure}", file=sys.stderr)
        print(f"finished in {time.monotonic() - started:.0f} s")
        return 1 if failures else 0
    with torch.inference_mode():
        copy_gbs = copy_bandwidth(args.replays)
        print(f"(a) copy bandwidth (read + write): {copy_gbs:.0f} GB/s\n", flush=True)

        rope = [] if only_products else bench_rope(args.calls, args.replays, failures)
        if rope:
            print("(c) rotary + v.contiguous + write_kv_cache  vs  rope_and_write_kv (Llama-8B heads, bf16)")
        for tokens, old_us, new_us in rope:
            saved = old_us - new_us
            print(f"    T={tokens}  old {old_us:6.2f} us  fused {new_us:6.2f} us  ({saved:+.2f} us saved)")
        print(flush=True)
        if not only_products:
            report_fused_reduce(args.replays, failures)
        elif args.tp > 1:
            print(f"shapes of one rank at tensor_parallel_size={args.tp}")

        print("(b) decode products, bf16; '*' marks the built-in default config")
        best: dict[tuple[str, int], tuple[Timing, Timing, object]] = {}
        best_normed: dict[tuple[str, int], tuple[Timing, Timing, object]] = {}
        for rows in ROWS:
            for name, n, k, gated in shapes:
                base, results = gemv_timings(name, n, k, gated, rows, args, copy_gbs, failures, deadline)
                if results:
                    config, top = min(results, key=lambda r: r[1].us)
                    best[(name, rows)] = (base, top, config)
                if (
                    results and _normed(name) and args.tp == 1
                ):  # (e), printed under the plain product it fuses into
                    sep, fused = normed_timings(name, n, k, rows, base, results, args, failures, deadline)
                    if fused:
                        config, top = min(fused, key=lambda r: r[1].us)
                        best_normed[(name, rows)] = (sep, top, config)
                torch.cuda.empty_cache()
                sys.stdout.flush()

    print("\nbest per shape      M   cuBLAS us   Triton us  % copy  speedup  config")
    table = {}
    for (name, rows), (base, top, config) in best.items():
        _, n, k, gated = next(s for s in shapes if s[0] == name)
        backend = "triton" if _picks_triton(base, top) else "cublas"
        table[(rows, n, k, gated)] = TableEntry(backend, config)
        print(
            f"{name:<18} {rows:2d} {base.us:11.2f} {top.us:11.2f} {100 * top.rate() / copy_gbs:6.1f}  "
            f"{base.us / top.us:6.2f}x  {config.label()}  -> {backend}"
        )
    print("\nnorm fused      M  separate us   fused us  speedup  config")
    for (name, rows), (sep, top, config) in best_normed.items():
        _, n, k, _ = next(s for s in shapes if s[0] == name)
        backend = "triton" if _picks_triton(sep, top) else "cublas"
        table[(rows, n, k, False, True)] = TableEntry(backend, config)
        print(
            f"{name:<14} {rows:2d} {sep.us:11.2f} {top.us:10.2f}  {sep.us / top.us:6.2f}x  "
            f"{config.label()}  -> {'fused' if backend == 'triton' else 'separate norm'}"
        )
    for rows in ROWS:
        saved = _per_step_saving(best, rows)
        if saved is not None:
            print(f"M={rows}: estimated decode-step change from the table's choices: {-saved:+.1f} us")
        for arch in args.arch or []:
            saved = _arch_step_saving(best, rows, arch)
            print(f"M={rows} {arch}: estimated decode-step change from the table's choices: {-saved:+.1f} us")
        if all((name, rows) in best_normed for name in NORMED):
            fused_gain = sum(
                (LAYERS if name != "lm_head" else 1) * max(0.0, sep.us - top.us)
                for name in NORMED
                for sep, top, _ in [best_normed[(name, rows)]]
            )
            print(f"M={rows}: folding the norms into the GEMV saves about {fused_gain:.1f} us per step more")
    if rope:
        print(f"M=1: rope_and_write_kv saves about {LAYERS * (rope[0][1] - rope[0][2]):.1f} us per step")
    if args.write_table:
        if only_products and args.write_table.is_file():  # shard / model shapes join the entries there
            kept = GemvTable.load(args.write_table)
            if kept.device == device_name:
                table = {**kept.entries, **table}
        GemvTable(device_name, table).save(
            args.write_table, {"triton": triton.__version__, "torch": torch.__version__}
        )
        print(f"wrote {args.write_table}")
    print(f"finished in {time.monotonic() - started:.0f} s")
    for failure in failures:
        print(f"MISMATCH: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _picks_triton(base: Timing, top: Timing) -> bool:
    """Whether the table takes the Triton config ``top`` over the baseline ``base``."""
    return top.us < TRITON_MARGIN * base.us


def _table_gain(base: Timing, top: Timing) -> float:
    """Microseconds the table's choice saves over cuBLAS for one call (0 where it keeps cuBLAS)."""
    return base.us - top.us if _picks_triton(base, top) else 0.0


def _per_step_saving(best, rows: int) -> float | None:
    """Microseconds a decode step saves at this M: 32 layers of qkv, o_proj, gate_up and the
    silu-fused down projection, plus the LM head, each taking the faster backend."""
    per_layer = ("qkv", "o_proj", "gate_up", "down+silu")
    if any((name, rows) not in best for name in per_layer + ("lm_head",)):
        return None

    def gain(name):
        return _table_gain(*best[(name, rows)][:2])

    return LAYERS * sum(gain(name) for name in per_layer) + gain("lm_head")


def _arch_step_saving(best, rows: int, arch: str) -> float:
    """``_per_step_saving`` for an ``--arch`` model: its products per layer (the dense MLP on the dense
    layers only), plus the LM head; products not timed count nothing."""
    from engine.bench.random_arch import hf_config

    cfg = hf_config(arch)
    shapes, layers = arch_shapes(arch)
    moe = cfg.get("n_routed_experts") or cfg.get("num_experts")
    dense_layers = cfg.get("first_k_dense_replace", 0) if moe else layers
    saved = 0.0
    for name, *_ in shapes:
        if (name, rows) not in best:
            continue
        gain = _table_gain(*best[(name, rows)][:2])
        product = name.split(":", 1)[1]
        if product == "lm_head":
            count = 1
        elif product.startswith("mlp_"):
            count = dense_layers
        else:
            count = layers - dense_layers if product.startswith("shared_") else layers
        saved += count * gain
    return saved


if __name__ == "__main__":
    sys.exit(main())
