"""Residual add + RMSNorm folded into a decode GEMV: ``y = rmsnorm(x + residual) * norm_weight @ W.T``.

At <= 8 rows every GEMV program reads its input rows in full anyway, so the norm that precedes the
QKV, gate/up and LM-head products costs one more pass over ``K`` values per program (L2 hits)
instead of a kernel launch (~2.1 us each, 65 per Llama-3.1-8B step on the H200). Each program
first sums the squares of its rows over the whole ``K`` (no cross-program communication), then
streams its weight slab as ``kernels/gemv.py`` does, normalising each input block as it loads it.

The rounding points are those of ``kernels/rms_norm.py``: ``h = x + residual`` in fp32 rounded to
the input dtype, ``h * rsqrt(mean(h^2) + eps)`` rounded, times the weight, rounded. Only the order
in which the squares are summed differs (per-lane partials over K steps), which can move the
normalised value by an ulp now and then. Program (0, 0) stores ``h`` as the new residual.
"""

from __future__ import annotations

import torch

from kernels._common import await_inputs, cdiv, launch_overlap, tl, triton, use_triton
from kernels.gemv import (
    _accumulate,
    _load_weight,
    _slab,
    _store_result,
    _zero_acc,
    check_rows,
    gemv_torch,
    partials_for,
    reduce_splits,
    resolve_config,
    split_k,
    tile_options,
)
from kernels.gemv_configs import GemvConfig
from kernels.rms_norm import fused_add_rms_norm_torch, rms_norm_torch

__all__ = ["gemv_norm", "gemv_norm_torch"]


@triton.jit
def _load_sum(x_ptrs, res_ptrs, mask, HAS_RESIDUAL: tl.constexpr):
    """``x + residual`` rounded to x's dtype, as ``kernels/rms_norm.py`` forms it."""
    x = tl.load(x_ptrs, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        res = tl.load(res_ptrs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + res.to(tl.float32)).to(x.dtype)
    return x


@triton.jit
def _gemv_norm_kernel(
    x_ptr,
    x_row_stride,
    res_ptr,
    res_row_stride,
    norm_w_ptr,
    h_ptr,
    h_row_stride,
    w_ptr,
    w_row_stride,
    bias_ptr,
    out_ptr,
    out_row_stride,
    partial_ptr,
    rows,
    n_out,
    k_in,
    k_per_split,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SPLIT: tl.constexpr,
    USE_DOT: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Program ``(n, s)``: the normed rows' product with N slab ``n`` over K part ``s``; program
    ``(0, 0)`` also stores ``h``."""
    await_inputs(USE_PDL)
    pid_n, pid_s, offs_n, offs_m, n_mask, m_mask, w_rows = _slab(
        w_ptr, w_row_stride, rows, n_out, USE_DOT, BLOCK_M, BLOCK_N
    )
    row_offs = offs_m.to(tl.int64)[:, None]
    x_rows = x_ptr + row_offs * x_row_stride
    res_rows = res_ptr + row_offs * res_row_stride
    h_rows = h_ptr + row_offs * h_row_stride
    # Columns of h that this program stores: all of them in program (0, 0), none elsewhere.
    h_end = k_in - k_in * tl.minimum(pid_n + pid_s, 1)

    # Pass 1: every row's sum of squares over the whole K (and, in one program, the new residual).
    if USE_DOT:
        squares = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    else:
        squares = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in range(0, k_in, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_mask = offs_k < k_in
        if USE_DOT:
            mask = m_mask[:, None] & k_mask[None, :]
            h = _load_sum(x_rows + offs_k[None, :], res_rows + offs_k[None, :], mask, HAS_RESIDUAL)
            if HAS_RESIDUAL:
                tl.store(h_rows + offs_k[None, :], h, mask=mask & (offs_k < h_end)[None, :])
        else:
            h = _load_sum(x_ptr + offs_k, res_ptr + offs_k, k_mask, HAS_RESIDUAL)
            if HAS_RESIDUAL:
                tl.store(h_ptr + offs_k, h, mask=k_mask & (offs_k < h_end))
        hf = h.to(tl.float32)
        squares += hf * hf
    if USE_DOT:
        rstd = tl.rsqrt(tl.sum(squares, axis=1) / k_in + eps)[:, None]
    else:
        rstd = tl.rsqrt(tl.sum(squares, axis=0) / k_in + eps)

    # Pass 2: the GEMV of kernels/gemv.py, normalising each input block as it is loaded.
    k_start = pid_s * k_per_split
    k_end = tl.minimum(k_start + k_per_split, k_in)
    acc = _zero_acc(USE_DOT, BLOCK_M, BLOCK_N, BLOCK_K)
    for k0 in range(k_start, k_end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        w, k_mask = _load_weight(w_rows, offs_k, n_mask, k_in, k_end, EVEN_K)
        gamma = tl.load(norm_w_ptr + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        if USE_DOT:
            mask = m_mask[:, None] & k_mask[None, :]
            h = _load_sum(x_rows + offs_k[None, :], res_rows + offs_k[None, :], mask, HAS_RESIDUAL)
            normed = (h.to(tl.float32) * rstd).to(h.dtype).to(tl.float32)
            x = (normed * gamma[None, :]).to(h.dtype)
        else:
            h = _load_sum(x_ptr + offs_k, res_ptr + offs_k, k_mask, HAS_RESIDUAL)
            normed = (h.to(tl.float32) * rstd).to(h.dtype).to(tl.float32)
            x = (normed * gamma).to(h.dtype)
        acc = _accumulate(acc, w, x, USE_DOT, DOT_IN_FP32)
    # No FUSED_REDUCE here: a split's partials go to the separate reduce kernel (_launch).
    _store_result(acc, bias_ptr, out_ptr, out_row_stride, partial_ptr, partial_ptr, pid_n, pid_s, offs_m,
                  offs_n, m_mask, n_mask, rows, n_out, HAS_BIAS, SPLIT, False, USE_DOT)  # fmt: skip


def _check(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
) -> None:
    if x.dim() != 2 or weight.dim() != 2 or weight.shape[1] != x.shape[1]:
        raise ValueError(
            f"x must be [M, K] for weight [N, K], got {tuple(x.shape)} and {tuple(weight.shape)}"
        )
    check_rows(x)
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"residual must match x ({tuple(x.shape)}, {x.dtype})")
    if norm_weight.shape != (x.shape[1],) or norm_weight.dtype != x.dtype or weight.dtype != x.dtype:
        raise ValueError("x, norm_weight [K] and weight must share one dtype")
    if bias is not None and (bias.shape != (weight.shape[0],) or bias.dtype != x.dtype):
        raise ValueError("bias must be [N] in x's dtype")


def _launch(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    config: GemvConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    tensors = (x, norm_weight, weight) if residual is None else (x, residual, norm_weight, weight)
    if any(t.stride(-1) != 1 for t in tensors):
        raise ValueError("x, residual, norm_weight and weight must be contiguous along K")
    rows, (n, k) = x.shape[0], weight.shape
    config = resolve_config(config, rows, n, k, False, x.device, normed=True)
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    h = torch.empty_like(x, memory_format=torch.contiguous_format) if residual is not None else x
    k_per_split, splits = split_k(k, config)
    partial = partials_for(out, splits)
    _gemv_norm_kernel[(cdiv(n, config.block_n), splits)](
        x,
        x.stride(0),
        residual if residual is not None else x,
        residual.stride(0) if residual is not None else 0,
        norm_weight,
        h,
        h.stride(0),
        weight,
        weight.stride(0),
        bias if bias is not None else weight,
        out,
        out.stride(0),
        partial,
        rows,
        n,
        k,
        k_per_split,
        eps,
        HAS_RESIDUAL=residual is not None,
        HAS_BIAS=bias is not None,
        SPLIT=splits > 1,
        **tile_options(config, x.dtype, k),
        **launch_overlap(x.device, rows),
    )
    if splits > 1:
        reduce_splits(partial, bias, weight, out, splits)
    return out, h


def gemv_norm_torch(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    if residual is None:
        normed, h = rms_norm_torch(x, norm_weight, eps), x
    else:
        normed, h = fused_add_rms_norm_torch(x, residual, norm_weight, eps)
    return gemv_torch(normed, weight, bias), h


def gemv_norm(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    norm_weight: torch.Tensor,
    eps: float,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    config: GemvConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rmsnorm(h) * norm_weight @ weight.T (+ bias), h)`` with ``h = x (+ residual)``, for
    ``x: [M <= 8, K]``; ``h`` is a new tensor when there is a residual, else ``x`` itself."""
    _check(x, residual, norm_weight, weight, bias)
    if use_triton(*(t for t in (x, residual, norm_weight, weight) if t is not None)):
        return _launch(x, residual, norm_weight, eps, weight, bias, config)
    return gemv_norm_torch(x, residual, norm_weight, eps, weight, bias)
