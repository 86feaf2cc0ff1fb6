"""Per-head products of a few rows: ``out[t, h] = x[t, h] @ w[h]`` for ``x: [T <= 16, H, I]`` and a
strided ``w: [H, I, J]`` (any strides), as ``torch.einsum("thi,hij->thj", x, w)``.

Multi-head latent attention's absorbed decode multiplies each head's query by that head's key
lift (``[N, R]``) and each head's latent output by its value lift (transposed, ``[R, V]``): at a
decode batch of a few rows these are GEMVs over 2 MB of weights, which cuBLAS's batched GEMM
takes ~3.5 us for on an H200 and which, not being a Triton kernel, cannot start early behind the
kernel before it (``kernels._common.await_inputs``). One program per (head, block of J columns)
streams its weight tile once for every row.
"""

from __future__ import annotations

import torch

from kernels._common import await_inputs, cdiv, launch_overlap, next_power_of_2, tl, triton, use_triton
from kernels._paged import dot, dot_in_fp32

__all__ = ["MAX_ROWS", "head_gemv", "head_gemv_torch"]

MAX_ROWS = 16  # one tl.dot tile of rows


@triton.jit
def _head_gemv_kernel(
    x_ptr,
    x_stride_t,
    x_stride_h,
    w_ptr,
    w_stride_h,
    w_stride_i,
    w_stride_j,
    out_ptr,
    out_stride_t,
    out_stride_h,
    rows,
    in_dim,
    out_dim,
    BLOCK_T: tl.constexpr,
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    head = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_J + tl.arange(0, BLOCK_J)
    ts = tl.arange(0, BLOCK_T)
    col_mask = cols < out_dim
    row_mask = ts < rows
    x_rows = x_ptr + ts[:, None] * x_stride_t + head * x_stride_h
    w_head = w_ptr + head * w_stride_h + cols[None, :] * w_stride_j
    acc = tl.zeros((BLOCK_T, BLOCK_J), dtype=tl.float32)
    for i0 in range(0, in_dim, BLOCK_I):
        offs_i = i0 + tl.arange(0, BLOCK_I)
        i_mask = offs_i < in_dim
        x = tl.load(x_rows + offs_i[None, :], mask=row_mask[:, None] & i_mask[None, :], other=0.0)
        w = tl.load(
            w_head + offs_i[:, None] * w_stride_i, mask=i_mask[:, None] & col_mask[None, :], other=0.0
        )
        acc += dot(x, w, DOT_IN_FP32)
    out = out_ptr + ts[:, None] * out_stride_t + head * out_stride_h + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=row_mask[:, None] & col_mask[None, :])


def head_gemv_torch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.einsum("thi,hij->thj", x, w)


def _check(x: torch.Tensor, w: torch.Tensor) -> None:
    if x.dim() != 3 or w.dim() != 3 or w.shape[0] != x.shape[1] or w.shape[1] != x.shape[2]:
        raise ValueError(f"x must be [T, H, I] for w [H, I, J], got {tuple(x.shape)} and {tuple(w.shape)}")
    if x.shape[0] > MAX_ROWS:
        raise ValueError(f"head_gemv takes at most {MAX_ROWS} rows, got {x.shape[0]}")
    if x.dtype != w.dtype:
        raise ValueError(f"x and w must share a dtype, got {x.dtype} and {w.dtype}")


def _launch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows, heads, in_dim = x.shape
    out_dim = w.shape[2]
    out = torch.empty((rows, heads, out_dim), dtype=x.dtype, device=x.device)
    if rows == 0:
        return out
    block_j = max(16, min(64 if out_dim >= 512 else 32, next_power_of_2(out_dim)))
    block_i = min(128, max(16, next_power_of_2(in_dim)))
    _head_gemv_kernel[(heads, cdiv(out_dim, block_j))](
        x, x.stride(0), x.stride(1), w, w.stride(0), w.stride(1), w.stride(2), out, out.stride(0),
        out.stride(1), rows, in_dim, out_dim, BLOCK_T=MAX_ROWS, BLOCK_I=block_i, BLOCK_J=block_j,
        DOT_IN_FP32=dot_in_fp32(x.dtype), num_warps=4, **launch_overlap(x.device, rows),
    )  # fmt: skip
    return out


def head_gemv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``einsum("thi,hij->thj", x, w)`` for at most ``MAX_ROWS`` rows: the Triton kernel where
    Triton runs, else torch."""
    _check(x, w)
    if use_triton(x, w):
        return _launch(x, w)
    return head_gemv_torch(x, w)
