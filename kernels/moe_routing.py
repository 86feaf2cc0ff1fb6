"""Mixture-of-experts routing: router logits, scores, top-k and the per-expert token count in two launches.

``route(x, weight, moe, bias)`` has the semantics of ``engine.layers.router.select_experts`` on
``F.linear(x.float(), weight)``: the same experts (logits that differ in fp32 rounding only can flip
a near-tie) with the same weights, each token's experts in descending order of choice. The torch path costs ~8 small kernels
per MoE layer (the fp32 GEMV, softmax or sigmoid, the bias, the group limit, topk, gather,
renormalisation, scaling) plus the count's two, a few tenths of a millisecond of a decode step and,
in an eager prefill, host time the GPU waits for; here it is two.

``_logits_kernel``: program ``(t, e, s)`` sums ``x[t] . weight[e]`` in fp32 (exact fp32 products,
no tf32) for ``BLOCK_T`` tokens, ``BLOCK_E`` experts and hidden part ``s``, into an fp32 partial
``[S, T, E]``. At a few tokens (``BLOCK_T == 1``) it is a per-lane FMA loop and the grid is wide in
experts and hidden parts, so that many SMs share the router weight's read; beyond, ``BLOCK_T``
tokens go through one IEEE ``tl.dot`` so the weight is read once per 16 tokens. The split count
follows from the grid's other extents and the SM count, never from tensor values.

``_select_kernel``: program ``t`` adds its logits' partials in split order, forms the scores
(softmax or sigmoid), the choice (scores + correction bias), limits the choice to the best
``topk_groups`` groups (held as a ``[groups, group size]`` tile), takes the top k by k rounds of
argmax (ties: the lowest expert id) and writes the chosen scores, renormalised and scaled; given
``counts``, it adds one per chosen expert there (integer atomics: the total is order-independent).

A token's logits are summed in an order that follows the tile shape, which follows the token
count: the same token may get other last bits at another batch size. The engine therefore keeps the
torch path in batch-invariant mode (``takes_routing_kernel``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels._common import (
    await_inputs,
    cdiv,
    check_last_dim_contiguous,
    launch_overlap,
    next_power_of_2,
    num_compute_units,
    tl,
    triton,
    use_triton,
)
from kernels.invariance import batch_invariant

__all__ = ["RoutingTiles", "choose_tiles", "route", "takes_routing_kernel"]

FMA_MAX_TOKENS = 8  # up to here one token per program; beyond, BLOCK_T tokens per tl.dot
_DOT_TOKENS = 16  # tl.dot needs every extent >= 16
# From here (prompt chunks) 64 tokens by up to 64 experts a program: 16 x 32 tiles did 64 serial
# fp32 dots of 16 x 32 x 32 a program, 151 us a DeepSeek-V2-Lite layer at 2,048 tokens (session 22's
# eager prefill profile: 3.9 of its 37 ms of kernels), for 0.5 GFLOP.
WIDE_MIN_TOKENS = 256
_WIDE_TOKENS = 64
_GROUP_SCORES = {"max": 1, "top2_sum": 2}  # 0: no group limit


class RoutingTiles(NamedTuple):
    """The logits kernel's tiles: tokens, experts and hidden columns per program, hidden splits."""

    block_t: int
    block_e: int
    block_h: int
    splits: int
    num_warps: int = 4


def choose_tiles(tokens: int, experts: int, hidden: int, device: torch.device) -> RoutingTiles:
    """Tiles from the shape and the device's SM count alone (so a CUDA graph's launch is fixed)."""
    if tokens <= FMA_MAX_TOKENS:
        # 2-4 weight rows x 512 columns (4-8 KiB) per program and step: at E=64 and E=128 alike 32
        # expert programs per token, each over a hidden split; untuned (no GPU measurement yet).
        block_t, block_e, block_h = 1, 2 if experts <= 64 else 4, 512
    elif tokens >= WIDE_MIN_TOKENS:
        # Unmeasured on a GPU: 64 x 64 fp32 accumulators (32 a thread at 4 warps), K steps of 32.
        block_t, block_e, block_h = _WIDE_TOKENS, min(64, max(16, next_power_of_2(experts))), 32
    else:
        block_t, block_e, block_h = _DOT_TOKENS, 32, 32
    block_h = min(block_h, max(16, next_power_of_2(hidden)))
    programs = cdiv(tokens, block_t) * cdiv(experts, block_e)
    splits = max(1, min(cdiv(hidden, block_h), cdiv(num_compute_units(device), programs)))
    return RoutingTiles(block_t, block_e, block_h, splits)


def takes_routing_kernel(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``route`` should run for these operands: Triton is in use for them, at least one
    token, and the process is not batch-invariant."""
    return (
        x.dim() == 2
        and x.stride(-1) == 1
        and x.shape[0] >= 1
        and not batch_invariant()
        and use_triton(x, weight)
    )


@triton.jit
def _logits_kernel(
    x_ptr,
    x_row_stride,
    w_ptr,
    w_row_stride,
    partial_ptr,
    tokens,
    experts,
    hidden,
    h_per_split,
    BLOCK_T: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_H: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """``partial[s, t, e] = sum over h in split s of x[t, h] * weight[e, h]`` in fp32."""
    await_inputs(USE_PDL)
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_e = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    split = tl.program_id(2)
    t_mask = offs_t < tokens
    e_mask = offs_e < experts
    h_start = split * h_per_split
    h_end = tl.minimum(h_start + h_per_split, hidden)
    x_rows = x_ptr + offs_t.to(tl.int64)[:, None] * x_row_stride
    w_rows = w_ptr + offs_e.to(tl.int64)[:, None] * w_row_stride
    if BLOCK_T == 1:
        # Products pile up per lane in the weight's load layout and are reduced once at the end.
        acc = tl.zeros((BLOCK_E, BLOCK_H), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_T, BLOCK_E), dtype=tl.float32)
    for h0 in range(h_start, h_end, BLOCK_H):
        offs_h = h0 + tl.arange(0, BLOCK_H)
        h_mask = offs_h < h_end
        w = tl.load(w_rows + offs_h[None, :], mask=e_mask[:, None] & h_mask[None, :], other=0.0)
        x = tl.load(x_rows + offs_h[None, :], mask=t_mask[:, None] & h_mask[None, :], other=0.0)
        if BLOCK_T == 1:
            acc += w.to(tl.float32) * x.to(tl.float32)
        else:
            acc += tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), input_precision="ieee")
    if BLOCK_T == 1:
        sums = tl.sum(acc, axis=1)[None, :]
    else:
        sums = acc
    out = partial_ptr + (split * tokens + offs_t.to(tl.int64))[:, None] * experts + offs_e[None, :]
    tl.store(out, sums, mask=t_mask[:, None] & e_mask[None, :])


@triton.jit
def _argmax_and_max(values, candidates, ids, NONE: tl.constexpr):
    """The lowest id among ``candidates`` holding their largest value (NONE if no value compares
    equal to the maximum: NaN), and that value."""
    best = tl.max(tl.max(tl.where(candidates, values, float("-inf")), axis=1), axis=0)
    hits = tl.where(candidates & (values == best), ids, NONE)
    return tl.min(tl.min(hits, axis=1), axis=0), best


@triton.jit
def _select_kernel(
    partial_ptr,
    bias_ptr,
    weights_ptr,
    ids_ptr,
    counts_ptr,
    counted_rows_ptr,
    tokens,
    experts,
    group_size,
    num_groups,
    splits,
    scaling,
    SIGMOID: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    GROUP_SCORE: tl.constexpr,
    TOPK_GROUPS: tl.constexpr,
    TOP_K: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    SCALE: tl.constexpr,
    COUNT: tl.constexpr,
    COUNT_SOME: tl.constexpr,
    SHARED: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Token ``t``'s top-k experts and weights; experts laid out as a ``[BLOCK_G, BLOCK_S]`` tile
    (group, index in group), one row when routing is not group-limited. ``SHARED`` more slots follow
    the top-k: experts ``experts .. experts + SHARED - 1`` (shared experts fused as routed ones), weight 1."""
    await_inputs(USE_PDL)
    t = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, BLOCK_G)[:, None]
    cols = tl.arange(0, BLOCK_S)[None, :]
    ids = rows * group_size + cols
    valid = (rows < num_groups) & (cols < group_size)
    logits = tl.zeros((BLOCK_G, BLOCK_S), dtype=tl.float32)
    for s in range(splits):
        logits += tl.load(partial_ptr + (s * tokens + t) * experts + ids, mask=valid, other=0.0)
    if SIGMOID:
        scores = tl.sigmoid(logits)
    else:
        logits = tl.where(valid, logits, float("-inf"))
        peak = tl.max(tl.max(logits, axis=1), axis=0)
        exps = tl.exp(logits - peak)
        scores = exps / tl.sum(tl.sum(exps, axis=1), axis=0)
    choice = scores
    if HAS_BIAS:
        choice += tl.load(bias_ptr + ids, mask=valid, other=0.0).to(tl.float32)
    choice = tl.where(valid, choice, float("-inf"))
    if GROUP_SCORE != 0:
        first = tl.max(choice, axis=1)
        if GROUP_SCORE == 2:
            # The best two of a group: mask the best's first occurrence (a tie counts twice, as in topk).
            first_col = tl.min(tl.where(choice == first[:, None], cols, BLOCK_S), axis=1)
            second = tl.max(tl.where(cols == first_col[:, None], float("-inf"), choice), axis=1)
            group_scores = (first + second)[:, None]
        else:
            group_scores = first[:, None]
        kept = rows < 0
        for _ in range(TOPK_GROUPS):
            best, _ = _argmax_and_max(group_scores, (rows < num_groups) & ~kept, rows, BLOCK_G)
            kept = kept | (rows == best)
        choice = tl.where(kept, choice, float("-inf"))
    slots = tl.arange(0, BLOCK_K)
    topk_ids = tl.zeros((BLOCK_K,), dtype=tl.int64)
    topk_weights = tl.zeros((BLOCK_K,), dtype=tl.float32)
    taken = ids < 0
    for k in range(TOP_K):
        # Experts outside the kept groups (choice -inf) stay candidates, as in torch.topk, for a
        # top_k larger than the kept groups hold; padding never is.
        chosen, best = _argmax_and_max(choice, valid & ~taken, ids, BLOCK_G * BLOCK_S)
        chosen = tl.minimum(chosen, experts - 1)  # NaN logits: any id, but never out of range
        # A padding column's id is the next group's first: only valid positions count.
        hit = valid & (ids == chosen)
        taken = taken | hit
        if HAS_BIAS or GROUP_SCORE != 0:  # the choice is not the score (bias; -inf outside kept groups)
            weight = tl.sum(tl.sum(tl.where(hit, scores, 0.0), axis=1), axis=0)
        else:  # the choice's maximum is the chosen score: one reduction less per slot
            weight = best
        topk_ids = tl.where(slots == k, chosen, topk_ids)
        topk_weights = tl.where(slots == k, weight, topk_weights)
    if RENORMALIZE:
        topk_weights = topk_weights / (tl.sum(topk_weights, axis=0) + 1e-20)
    if SCALE:
        topk_weights = topk_weights * scaling
    routed = slots < TOP_K
    if SHARED > 0:
        topk_ids = tl.where(routed, topk_ids, (experts + slots - TOP_K).to(tl.int64))
        topk_weights = tl.where(routed, topk_weights, 1.0)
    slot_mask = slots < TOP_K + SHARED
    tl.store(ids_ptr + t * (TOP_K + SHARED) + slots, topk_ids, mask=slot_mask)
    tl.store(weights_ptr + t * (TOP_K + SHARED) + slots, topk_weights, mask=slot_mask)
    if COUNT:
        counted = routed
        if COUNT_SOME:  # rows from there on pad a captured size: routed like the others, never counted
            counted = counted & (tl.zeros_like(slots) + t < tl.load(counted_rows_ptr))
        tl.atomic_add(counts_ptr + topk_ids, tl.full((BLOCK_K,), 1, tl.int64), mask=counted)


def _check(x: torch.Tensor, weight: torch.Tensor, moe, correction_bias: torch.Tensor | None) -> None:
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(
            f"x must be [T, H] and weight [E, H], got {tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if weight.dtype != torch.float32:
        raise ValueError(f"the router weight must be float32, got {weight.dtype}")
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
    if weight.shape[0] != moe.num_experts:
        raise ValueError(f"weight has {weight.shape[0]} experts, the MoE config {moe.num_experts}")
    if correction_bias is not None and correction_bias.shape != (moe.num_experts,):
        raise ValueError(f"correction_bias must be [{moe.num_experts}], got {tuple(correction_bias.shape)}")
    if x.shape[0] < 1:
        raise ValueError("the routing kernels take at least one token, got none")
    check_last_dim_contiguous("x", x)
    check_last_dim_contiguous("weight", weight)


def _launch(
    x: torch.Tensor,
    weight: torch.Tensor,
    moe,
    correction_bias: torch.Tensor | None,
    tiles: RoutingTiles | None,
    counts: torch.Tensor | None,
    shared_slots: int,
    counted_rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, hidden = x.shape
    experts = weight.shape[0]
    tiles = tiles or choose_tiles(tokens, experts, hidden, x.device)
    h_per_split = cdiv(cdiv(hidden, tiles.splits), tiles.block_h) * tiles.block_h
    splits = cdiv(hidden, h_per_split)
    partial = torch.empty((splits, tokens, experts), dtype=torch.float32, device=x.device)
    grid = (cdiv(tokens, tiles.block_t), cdiv(experts, tiles.block_e), splits)
    _logits_kernel[grid](
        x,
        x.stride(0),
        weight,
        weight.stride(0),
        partial,
        tokens,
        experts,
        hidden,
        h_per_split,
        BLOCK_T=tiles.block_t,
        BLOCK_E=tiles.block_e,
        BLOCK_H=tiles.block_h,
        num_warps=tiles.num_warps,
        **launch_overlap(x.device, tokens),
    )
    slots = moe.top_k + shared_slots
    topk_weights = torch.empty((tokens, slots), dtype=torch.float32, device=x.device)
    topk_ids = torch.empty((tokens, slots), dtype=torch.int64, device=x.device)
    grouped = moe.num_groups > 1
    group_size = experts // moe.num_groups
    block_g, block_s = next_power_of_2(moe.num_groups), next_power_of_2(group_size)
    _select_kernel[(tokens,)](
        partial,
        correction_bias if correction_bias is not None else partial,
        topk_weights,
        topk_ids,
        counts if counts is not None else topk_ids,
        counted_rows if counted_rows is not None else topk_ids,
        tokens,
        experts,
        group_size,
        moe.num_groups,
        splits,
        float(moe.routed_scaling_factor),
        SIGMOID=moe.scoring == "sigmoid",
        HAS_BIAS=correction_bias is not None,
        GROUP_SCORE=_GROUP_SCORES[moe.group_score] if grouped else 0,
        TOPK_GROUPS=moe.topk_groups,
        TOP_K=moe.top_k,
        RENORMALIZE=moe.renormalize,
        SCALE=moe.routed_scaling_factor != 1.0,
        COUNT=counts is not None,
        COUNT_SOME=counted_rows is not None,
        SHARED=shared_slots,
        BLOCK_G=block_g,
        BLOCK_S=block_s,
        BLOCK_K=next_power_of_2(slots),
        # 3k whole-tile reductions (k = top_k): warp shuffles in one warp, a barrier each across warps.
        num_warps=1 if block_g * block_s <= 512 else 4,
        **launch_overlap(partial.device, tokens),
    )
    return topk_weights, topk_ids


def route(
    x: torch.Tensor,
    weight: torch.Tensor,
    moe,
    correction_bias: torch.Tensor | None = None,
    tiles: RoutingTiles | None = None,
    counts: torch.Tensor | None = None,
    shared_slots: int = 0,
    counted_rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x: [T, H]`` (fp32, bf16 or fp16), ``weight: [E, H]`` fp32, ``moe``: the layer's
    ``engine.checkpoint.moe_config.MoEConfig`` -> ``(topk_weights float32 [T, k + s], topk_ids int64
    [T, k + s])``, as ``select_experts(F.linear(x.float(), weight), moe, correction_bias)`` followed
    by ``s = shared_slots`` slots of experts E .. E + s - 1 at weight 1; ``counts`` (int64 ``[E]``),
    when given, gains one per (token, chosen routed expert); with ``counted_rows`` (an int tensor
    ``[1]`` on x's device, read there) only the tokens before that row count: the rest pad a size a
    CUDA graph was captured at."""
    if shared_slots < 0:
        raise ValueError(f"shared_slots must be >= 0, got {shared_slots}")
    _check(x, weight, moe, correction_bias)
    if counts is not None and (counts.dtype != torch.int64 or counts.shape != (moe.num_experts,)):
        raise ValueError(
            f"counts must be int64 [{moe.num_experts}], got {counts.dtype} {tuple(counts.shape)}"
        )
    if counted_rows is not None and (
        counted_rows.numel() != 1 or counted_rows.dtype not in (torch.int32, torch.int64)
    ):
        raise ValueError(
            f"counted_rows must be one int32 or int64 value, got {counted_rows.dtype} {tuple(counted_rows.shape)}"
        )
    if not use_triton(x, weight):
        raise ValueError("route runs the Triton kernels only: check takes_routing_kernel first")
    return _launch(x, weight, moe, correction_bias, tiles, counts, shared_slots, counted_rows)
