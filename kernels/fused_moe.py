"""Mixture-of-experts feed-forward over routed tokens: ``out[t] = sum_j w[t,j] * expert_{ids[t,j]}(x[t])``.

Each expert is a SwiGLU MLP: ``w2[e] @ (silu(w13[e, :I] @ x) * (w13[e, I:] @ x))``. Two Triton paths,
picked by ``choose_config`` from the batch shape alone (``kernels/fused_moe_configs.py``), or by the
type of an explicit ``config``:

Grouped GEMMs (``MoeConfig``): ``kernels/moe_align.py`` sorts the (token, slot) pairs by expert into
row tiles of one expert each, so one expert's weights are read once per step; one grouped GEMM per
projection: ``x @ w13[e].T`` with SwiGLU in its epilogue, writing ``[T*k, I]`` in x's dtype, then
``@ w2[e].T``, writing each pair's product ``[T*k, H]`` in x's dtype (it is rounded to it anyway).
The combine kernel then forms ``sum_j w[t,j] * product[t*k+j]`` in fp32, adding the k slots left to
right, and writes x's dtype: not an atomic add into ``[T, H]``, which would make the bits depend on
which program finished first. Weighting there rather than in the down kernel's epilogue gives the same
fp32 terms, from half the bytes an fp32 ``[T*k, H]`` buffer would take to write and read back
(at 2,048 tokens of DeepSeek-V2-Lite, 67 MB a layer instead of 134).

Small batch (``MoeGemvConfig``, up to ``SMALL_BATCH_MAX_PAIRS`` pairs): no sort, no align, no combine
kernel. The gate/up kernel's program ``(p, n)`` reads ``e = topk_ids[p]`` on the device and forms
``h[p] = silu(w13[e, :I] x_t) * (w13[e, I:] x_t)`` for one tile of I as a GEMV (fp32 per-lane sums
over K, added once at the end, as ``kernels/gemv.py``'s FMA variant does); the down kernel's program
``(t, n)`` adds ``w[t,j] * (w2[e_j] h[t*k+j])`` over the slots j = 0, 1, ... in that order, inside
the kernel, and writes x's dtype. A pair whose expert is shared with another pair reads that
expert's weights again (from L2 at best): the price of skipping the sort, small at these sizes.

Both paths round as the reference does (each projection to x's dtype, silu, the product, the down
projection; routing weight and slot sum in fp32) and differ from each other only in the order of
the fp32 additions: the K reduction (tensor-core tiles against per-lane sums) and, for k > 2, the
association of the slot sum (both Triton paths add slots left to right; the reference's torch sum
may pair them differently). In both, a token's result depends only on its own row, its routing and the config,
never on the other tokens of the batch; the small path's bits depend on ``block_k`` alone. A batch
that crosses the threshold switches paths, so the same token may differ in the last bits between
a batch of T and one of T + 1 at that boundary. Tiles: ``kernels/fused_moe_configs.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels import cpu_invariant
from kernels._common import (
    await_inputs,
    cdiv,
    check_last_dim_contiguous,
    launch_overlap,
    next_power_of_2,
    tl,
    triton,
    use_triton,
)
from kernels._paged import dot_in_fp32
from kernels.fused_moe_configs import AnyMoeConfig, MoeConfig, MoeGemvConfig, choose_config
from kernels.gemv import _accumulate, _load_weight, _zero_acc
from kernels.moe_align import moe_align_block_size

__all__ = ["check_moe_inputs", "fused_moe", "fused_moe_reference"]

COMBINE_BLOCK_N = 1024  # hidden columns per combine program: k loads of 2 KB (bf16) each


@triton.jit
def _tile_rows(sorted_pair_ids_ptr, expert_ids_ptr, num_pairs, BLOCK_M: tl.constexpr):
    """This program's expert (-1: a tile past the end) and its pair ids, with a mask of the real ones."""
    tile = tl.program_id(0)
    expert = tl.load(expert_ids_ptr + tile)
    pairs = tl.load(sorted_pair_ids_ptr + tile * BLOCK_M + tl.arange(0, BLOCK_M))
    return expert, pairs, pairs < num_pairs


@triton.jit
def _expert_gemm(
    a_ptr,
    a_rows,
    a_row_stride,
    a_row_mask,
    w_ptr,
    w_rows,
    w_row_stride,
    w_row_mask,
    k_len,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
):
    """``a[a_rows, :k_len] @ w[w_rows, :k_len].T`` in fp32, ``[BLOCK_M, BLOCK_N]``.

    The addresses are int32 offsets from the two base pointers (the launcher checks they fit):
    64-bit pointer tiles held across the loop spilled registers on sm_90 at every tile tried.
    """
    ks = tl.arange(0, BLOCK_K)
    a_offsets = a_rows[:, None] * a_row_stride + ks[None, :]  # [M, K]
    w_offsets = w_rows[None, :] * w_row_stride + ks[:, None]  # [K, N]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, k_len, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptr + a_offsets, mask=a_row_mask[:, None], other=0.0)
            w = tl.load(w_ptr + w_offsets, mask=w_row_mask[None, :], other=0.0)
        else:
            k_mask = ks < k_len - k0
            a = tl.load(a_ptr + a_offsets, mask=a_row_mask[:, None] & k_mask[None, :], other=0.0)
            w = tl.load(w_ptr + w_offsets, mask=k_mask[:, None] & w_row_mask[None, :], other=0.0)
        if DOT_IN_FP32:
            acc = tl.dot(a.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, w, acc)
        a_offsets += BLOCK_K
        w_offsets += BLOCK_K
    return acc


@triton.jit
def _swiglu(gate_acc, up_acc, dtype):
    """Rounded as the reference does: each projection, then silu, then the product, to ``dtype``."""
    gate = gate_acc.to(dtype).to(tl.float32)
    act = (gate * tl.sigmoid(gate)).to(dtype).to(tl.float32)
    return (act * up_acc.to(dtype).to(tl.float32)).to(dtype)


@triton.jit(do_not_specialize=["num_pairs"])
def _gate_up_kernel(
    x_ptr,
    x_row_stride,
    w_ptr,
    w_expert_stride,
    w_row_stride,
    out_ptr,
    sorted_pair_ids_ptr,
    expert_ids_ptr,
    num_pairs,
    top_k,
    hidden,
    inter,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    # One program: BLOCK_M pairs of one expert x BLOCK_N intermediate columns, gate and up
    # interleaved in one 2 * BLOCK_N-wide weight tile so both share one GEMM loop.
    expert, pairs, row_mask = _tile_rows(sorted_pair_ids_ptr, expert_ids_ptr, num_pairs, BLOCK_M)
    if expert < 0:
        return
    lanes = tl.arange(0, 2 * BLOCK_N)
    cols = tl.program_id(1) * BLOCK_N + lanes // 2
    w_rows = cols + (lanes % 2) * inter  # even lanes: gate row, odd lanes: up row
    acc = _expert_gemm(
        x_ptr, pairs // top_k, x_row_stride, row_mask, w_ptr + expert.to(tl.int64) * w_expert_stride, w_rows,
        w_row_stride, cols < inter, hidden, BLOCK_M, 2 * BLOCK_N, BLOCK_K, EVEN_K, DOT_IN_FP32,
    )  # fmt: skip
    gate_acc, up_acc = tl.split(tl.reshape(acc, [BLOCK_M, BLOCK_N, 2]))
    out = _swiglu(gate_acc, up_acc, out_ptr.dtype.element_ty)
    out_cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    out_mask = row_mask[:, None] & (out_cols < inter)[None, :]
    tl.store(out_ptr + pairs[:, None] * inter + out_cols[None, :], out, mask=out_mask)


@triton.jit(do_not_specialize=["num_pairs"])
def _down_kernel(
    act_ptr,
    w_ptr,
    w_expert_stride,
    w_row_stride,
    out_ptr,
    sorted_pair_ids_ptr,
    expert_ids_ptr,
    num_pairs,
    hidden,
    inter,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    # One program: BLOCK_M pairs of one expert x BLOCK_N hidden columns (weighted in the combine).
    expert, pairs, row_mask = _tile_rows(sorted_pair_ids_ptr, expert_ids_ptr, num_pairs, BLOCK_M)
    if expert < 0:
        return
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < hidden
    acc = _expert_gemm(
        act_ptr, pairs, inter, row_mask, w_ptr + expert.to(tl.int64) * w_expert_stride, cols, w_row_stride,
        col_mask, inter, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, DOT_IN_FP32,
    )  # fmt: skip
    tl.store(
        out_ptr + pairs[:, None] * hidden + cols[None, :],
        acc.to(out_ptr.dtype.element_ty),
        mask=row_mask[:, None] & col_mask[None, :],
    )


@triton.jit
def _combine_kernel(
    product_ptr,
    weights_ptr,
    out_ptr,
    hidden,
    TOP_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    # One program: one token x BLOCK_N hidden columns, its k weighted products added left to right.
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < hidden
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for slot in tl.static_range(TOP_K):
        pair = token * TOP_K + slot
        weight = tl.load(weights_ptr + pair)
        product = tl.load(product_ptr + pair * hidden + cols, mask=mask, other=0.0)
        acc += product.to(tl.float32) * weight
    tl.store(out_ptr + token * hidden + cols, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gate_up_gemv_kernel(
    x_ptr,
    x_row_stride,
    w_ptr,
    w_expert_stride,
    w_row_stride,
    ids_ptr,
    out_ptr,
    top_k,
    hidden,
    inter,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    # One program: pair p = t * k + j, BLOCK_N intermediate columns, gate and up rows in one K loop.
    pair = tl.program_id(0)
    expert = tl.load(ids_ptr + pair).to(tl.int64)
    x_row = x_ptr + (pair // top_k).to(tl.int64) * x_row_stride
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < inter
    gate_rows = w_ptr + expert * w_expert_stride + cols.to(tl.int64)[:, None] * w_row_stride
    up_rows = gate_rows + inter * w_row_stride
    gate_acc = _zero_acc(False, 1, BLOCK_N, BLOCK_K)
    up_acc = _zero_acc(False, 1, BLOCK_N, BLOCK_K)
    for k0 in range(0, hidden, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        gate_w, k_mask = _load_weight(gate_rows, offs_k, col_mask, hidden, hidden, EVEN_K)
        up_w, _ = _load_weight(up_rows, offs_k, col_mask, hidden, hidden, EVEN_K)
        x = tl.load(x_row + offs_k, mask=k_mask, other=0.0)
        gate_acc = _accumulate(gate_acc, gate_w, x, False, False)
        up_acc = _accumulate(up_acc, up_w, x, False, False)
    out = _swiglu(tl.sum(gate_acc, axis=1), tl.sum(up_acc, axis=1), out_ptr.dtype.element_ty)
    tl.store(out_ptr + pair.to(tl.int64) * inter + cols, out, mask=col_mask)


@triton.jit
def _down_gemv_kernel(
    act_ptr,
    w_ptr,
    w_expert_stride,
    w_row_stride,
    ids_ptr,
    weights_ptr,
    out_ptr,
    hidden,
    TOP_K: tl.constexpr,
    INTER: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    # One program: token t, BLOCK_N hidden columns, every slot of t added in slot order. Both loops
    # are unrolled (top_k and the intermediate size are the model's constants): a rolled slot loop
    # waited for each slot's weights before asking for the next slot's, a chain of ~2k memory
    # latencies per program that kept this kernel at about half the copy rate on an H200.
    token = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < hidden
    col_offsets = cols.to(tl.int64)[:, None] * w_row_stride
    total = tl.zeros([BLOCK_N], dtype=tl.float32)
    for slot in tl.static_range(TOP_K):
        pair = token * TOP_K + slot
        rows = w_ptr + tl.load(ids_ptr + pair).to(tl.int64) * w_expert_stride + col_offsets
        act_row = act_ptr + pair.to(tl.int64) * INTER
        acc = _zero_acc(False, 1, BLOCK_N, BLOCK_K)
        for k0 in tl.static_range(0, INTER, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            w, k_mask = _load_weight(rows, offs_k, col_mask, INTER, INTER, EVEN_K)
            acc = _accumulate(acc, w, tl.load(act_row + offs_k, mask=k_mask, other=0.0), False, False)
        down = tl.sum(acc, axis=1).to(act_ptr.dtype.element_ty).to(tl.float32)
        total += down * tl.load(weights_ptr + pair)
    tl.store(out_ptr + token.to(tl.int64) * hidden + cols, total.to(out_ptr.dtype.element_ty), mask=col_mask)


def _launch(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    config: AnyMoeConfig | None = None,
) -> torch.Tensor:
    for name, t in (("x", x), ("w13", w13), ("w2", w2)):
        check_last_dim_contiguous(name, t)
    tokens, hidden = x.shape
    experts, inter = w13.shape[0], w13.shape[1] // 2
    top_k = topk_ids.shape[1]
    num_pairs = tokens * top_k
    if num_pairs == 0:
        return torch.zeros_like(x)
    largest = max(x.numel(), w13[0].numel(), w2[0].numel(), num_pairs * max(hidden, inter))
    if largest >= 2**31:
        raise ValueError(f"fused_moe addresses with int32 offsets; {largest} elements is too many")
    config = config or choose_config(tokens, top_k, experts, hidden, inter, x.device)
    if isinstance(config, MoeGemvConfig):
        return _launch_small_batch(x, w13, w2, topk_weights, topk_ids, config)
    return _launch_grouped(x, w13, w2, topk_weights, topk_ids, config)


def _launch_grouped(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    config: MoeConfig,
) -> torch.Tensor:
    tokens, hidden = x.shape
    experts, inter = w13.shape[0], w13.shape[1] // 2
    top_k = topk_ids.shape[1]
    num_pairs = tokens * top_k
    aligned = moe_align_block_size(topk_ids, experts, config.block_m)
    num_tiles = aligned.expert_ids.numel()
    act = torch.empty((num_pairs, inter), dtype=x.dtype, device=x.device)
    products = torch.empty((num_pairs, hidden), dtype=x.dtype, device=x.device)
    tiles = {
        "BLOCK_M": config.block_m,
        "BLOCK_N": config.block_n,
        "BLOCK_K": config.block_k,
        "DOT_IN_FP32": dot_in_fp32(x.dtype),
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
    }
    _gate_up_kernel[(num_tiles, cdiv(inter, config.block_n))](
        x, x.stride(0), w13, w13.stride(0), w13.stride(1), act, aligned.sorted_pair_ids, aligned.expert_ids,
        num_pairs, top_k, hidden, inter, EVEN_K=hidden % config.block_k == 0, **tiles, **launch_overlap(x.device, tokens),
    )  # fmt: skip
    _down_kernel[(num_tiles, cdiv(hidden, config.block_n))](
        act, w2, w2.stride(0), w2.stride(1), products, aligned.sorted_pair_ids,
        aligned.expert_ids, num_pairs, hidden, inter, EVEN_K=inter % config.block_k == 0, **tiles, **launch_overlap(act.device, tokens),
    )  # fmt: skip
    return combine_products(products, topk_weights)


def combine_products(products: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """``products: [T*k, H]`` (pair t*k+j: token t's slot j), ``topk_weights: [T, k]`` fp32 ->
    ``[T, H]`` in the products' dtype: ``sum_j w[t,j] * products[t*k+j]`` in fp32, slots left to right."""
    tokens, top_k = topk_weights.shape
    hidden = products.shape[1]
    out = products.new_empty((tokens, hidden))
    block_n = min(COMBINE_BLOCK_N, next_power_of_2(hidden))
    _combine_kernel[(tokens, cdiv(hidden, block_n))](
        products, topk_weights.contiguous(), out, hidden, TOP_K=top_k, BLOCK_N=block_n, num_warps=4,
        **launch_overlap(products.device, tokens),
    )  # fmt: skip
    return out


def _launch_small_batch(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    config: MoeGemvConfig,
) -> torch.Tensor:
    """Two launches whose grids depend on T alone; no host sync, so a CUDA graph can capture them."""
    tokens, hidden = x.shape
    inter = w2.shape[2]
    top_k = topk_ids.shape[1]
    ids = topk_ids.contiguous()
    act = torch.empty((tokens * top_k, inter), dtype=x.dtype, device=x.device)
    out = torch.empty((tokens, hidden), dtype=x.dtype, device=x.device)
    up_k, down_k = (min(config.block_k, max(16, next_power_of_2(k))) for k in (hidden, inter))
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    _gate_up_gemv_kernel[(tokens * top_k, cdiv(inter, config.up_block_n))](
        x, x.stride(0), w13, w13.stride(0), w13.stride(1), ids, act, top_k, hidden, inter,
        BLOCK_N=config.up_block_n, BLOCK_K=up_k, EVEN_K=hidden % up_k == 0, **options, **launch_overlap(x.device, tokens),
    )  # fmt: skip
    _down_gemv_kernel[(tokens, cdiv(hidden, config.down_block_n))](
        act, w2, w2.stride(0), w2.stride(1), ids, topk_weights.contiguous(), out, hidden, TOP_K=top_k, INTER=inter,
        BLOCK_N=config.down_block_n, BLOCK_K=down_k, EVEN_K=inter % down_k == 0, **options, **launch_overlap(act.device, tokens),
    )  # fmt: skip
    return out


def _combine(pair_out: torch.Tensor, tokens: int, top_k: int, dtype: torch.dtype) -> torch.Tensor:
    """``[T*k, H]`` fp32 weighted expert outputs -> ``[T, H]``, summed over the slots in order."""
    return pair_out.view(tokens, top_k, pair_out.shape[-1]).sum(dim=1).to(dtype)


def check_moe_inputs(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> None:
    if x.dim() != 2:
        raise ValueError(f"x must be [tokens, hidden], got {tuple(x.shape)}")
    tokens, hidden = x.shape
    if w13.dim() != 3 or w13.shape[2] != hidden or w13.shape[1] % 2 != 0:
        raise ValueError(f"w13 must be [experts, 2*inter, hidden={hidden}], got {tuple(w13.shape)}")
    experts, inter = w13.shape[0], w13.shape[1] // 2
    if w2.shape != (experts, hidden, inter):
        raise ValueError(
            f"w2 must be [experts={experts}, hidden={hidden}, inter={inter}], got {tuple(w2.shape)}"
        )
    if topk_ids.dim() != 2 or topk_ids.shape[0] != tokens or topk_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"topk_ids must be int [tokens={tokens}, k], got {tuple(topk_ids.shape)} {topk_ids.dtype}"
        )
    if topk_weights.shape != topk_ids.shape or topk_weights.dtype != torch.float32:
        raise ValueError(
            f"topk_weights must be float32 {tuple(topk_ids.shape)}, got {tuple(topk_weights.shape)} {topk_weights.dtype}"
        )
    if w13.dtype != x.dtype or w2.dtype != x.dtype:
        raise ValueError(f"weights must be in x's dtype {x.dtype}, got {w13.dtype} / {w2.dtype}")


def fused_moe_reference(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
) -> torch.Tensor:
    """One matmul pair per expert that has tokens; products in x's dtype, the weighted sum in fp32."""
    tokens, hidden = x.shape
    top_k = topk_ids.shape[1]
    inter = w13.shape[1] // 2
    flat_ids = topk_ids.reshape(-1)
    order = torch.argsort(flat_ids, stable=True)  # pair index = token * k + slot
    counts = torch.bincount(flat_ids, minlength=w13.shape[0]).tolist()
    pair_out = torch.zeros(tokens * top_k, hidden, dtype=torch.float32, device=x.device)
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        pairs = order[start : start + count]
        start += count
        rows = x.index_select(0, pairs // top_k)
        gate_up = cpu_invariant.linear(rows, w13[expert])  # rows per expert follow the batch
        act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
        down = cpu_invariant.linear(act, w2[expert])
        weights = topk_weights.reshape(-1).index_select(0, pairs)
        pair_out.index_copy_(0, pairs, down.float() * weights[:, None])
    return _combine(pair_out, tokens, top_k, x.dtype)


def fused_moe(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    config: AnyMoeConfig | None = None,
) -> torch.Tensor:
    """``x: [T, H]``, ``w13: [E, 2I, H]`` (gate rows then up rows), ``w2: [E, H, I]``,
    ``topk_weights: [T, k]`` fp32, ``topk_ids: [T, k]`` distinct experts per token -> ``[T, H]``.
    ``config``: the Triton path and its tiles (default: ``choose_config``); the reference ignores it."""
    check_moe_inputs(x, w13, w2, topk_weights, topk_ids)
    if use_triton(x, w13, w2, topk_weights, topk_ids):
        return _launch(x, w13, w2, topk_weights, topk_ids, config)
    return fused_moe_reference(x, w13, w2, topk_weights, topk_ids)
