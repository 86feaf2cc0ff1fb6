"""Batch-invariant GEMM: ``y[M, N] = x[M, K] @ W[N, K].T (+ bias)``, the same bits for a row whatever M.

The engine's batch-invariant mode (``EngineConfig.batch_invariant``) sends every linear layer and
the LM head here instead of cuBLAS or the decode GEMV, which both pick their tiling (and split-K) by
the number of rows. Here the tile config depends only on the weight's shape (``config_for``), never
on M: every output element is one program's fp32 sum over K in ``BLOCK_K`` steps in ascending order,
computed by the same MMA instruction shape whether the row sits alone or among 2,047 others. No
split-K, no autotuning. Inputs bf16/fp16 (fp32 accumulate), or fp32 with exact fp32 products.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels._common import cdiv, interpreting, tl, triton, use_triton

__all__ = ["MatmulConfig", "config_for", "invariant_matmul", "invariant_matmul_torch"]


@dataclass(frozen=True)
class MatmulConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 4


BLOCK_M = 64  # one warpgroup's MMA height; the same for every M, so a row's products never change shape
BLOCK_K = 128
# Output widths up to this get 32-column slabs: at batch 1 a 4,096-wide projection then spreads over
# 128 programs instead of 64, nearer to filling an H200's 132 SMs with weight streams.
_NARROW_N = 8192
GROUP_M = 8  # programs walk GROUP_M row tiles per column slab (L2 reuse); order only, not numerics


def config_for(n: int, k: int) -> MatmulConfig:
    """The one tile config of a weight ``[n, k]``: a function of the weight alone, never of M."""
    del k  # the K loop has the same BLOCK_K steps for every width
    return MatmulConfig(BLOCK_M, 32 if n <= _NARROW_N else 64, BLOCK_K)


# The row count changes every step: specializing on it would compile new variants mid-serving.
@triton.jit(do_not_specialize=["rows"])
def _invariant_matmul_kernel(
    x_ptr,
    x_row_stride,
    w_ptr,
    w_row_stride,
    bias_ptr,
    out_ptr,
    out_row_stride,
    rows,
    n_out,
    k_in,
    HAS_BIAS: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Grouped program order: GROUP_M row tiles share each column slab while it is in L2.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(rows, BLOCK_M)
    tiles_n = tl.cdiv(n_out, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < rows
    n_mask = offs_n < n_out
    x_ptrs = x_ptr + offs_m.to(tl.int64)[:, None] * x_row_stride + offs_k[None, :]
    w_ptrs = w_ptr + offs_n.to(tl.int64)[None, :] * w_row_stride + offs_k[:, None]  # [K, N] view of W
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k_in, BLOCK_K):
        if EVEN_K:
            x = tl.load(x_ptrs, mask=m_mask[:, None], other=0.0)
            w = tl.load(w_ptrs, mask=n_mask[None, :], other=0.0)
        else:
            k_mask = offs_k < k_in - k0
            x = tl.load(x_ptrs, mask=m_mask[:, None] & k_mask[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=k_mask[:, None] & n_mask[None, :], other=0.0)
        if DOT_IN_FP32:
            acc += tl.dot(x.to(tl.float32), w.to(tl.float32), input_precision="ieee")
        else:
            acc = tl.dot(x, w, acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + offs_m.to(tl.int64)[:, None] * out_row_stride + offs_n[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=m_mask[:, None] & n_mask[None, :])


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(
            f"x [M, K] and weight [N, K] expected, got {tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if x.dtype != weight.dtype:
        raise ValueError(f"x ({x.dtype}) and weight ({weight.dtype}) must share a dtype")
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")


def _launch(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, config: MatmulConfig | None = None
) -> torch.Tensor:
    if x.stride(-1) != 1 or weight.stride(-1) != 1:
        raise ValueError("invariant_matmul needs x and weight contiguous in K")
    rows, k = x.shape
    n = weight.shape[0]
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows == 0 or n == 0:
        return out
    config = config or config_for(n, k)
    grid = (cdiv(rows, config.block_m) * cdiv(n, config.block_n),)
    _invariant_matmul_kernel[grid](
        x,
        x.stride(0),
        weight,
        weight.stride(0),
        bias if bias is not None else weight,
        out,
        out.stride(0),
        rows,
        n,
        k,
        HAS_BIAS=bias is not None,
        DOT_IN_FP32=x.dtype == torch.float32 or interpreting(),
        EVEN_K=k % config.block_k == 0,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        GROUP_M=GROUP_M,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return out


def invariant_matmul_torch(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The reference: fp32 products and sums, rounded once (not itself batch-invariant on a GPU)."""
    out = x.float() @ weight.float().t()
    if bias is not None:
        out += bias.float()
    return out.to(x.dtype)


def invariant_matmul(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    config: MatmulConfig | None = None,
) -> torch.Tensor:
    """``x: [M, K] @ weight: [N, K].T (+ bias)`` -> ``[M, N]`` in x's dtype. ``config`` (tests and the
    GPU script's sweep only): another tile config than ``config_for``'s."""
    _check(x, weight, bias)
    if use_triton(x, weight):
        return _launch(x, weight, bias, config)
    return invariant_matmul_torch(x, weight, bias)
