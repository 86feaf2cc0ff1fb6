"""Batch-invariant GEMM: ``y[M, N] = x[M, K] @ W[N, K].T (+ bias)``, the same bits for a row whatever M.

The engine's batch-invariant mode (``EngineConfig.batch_invariant``) sends every linear layer and
the LM head here instead of cuBLAS or the decode GEMV, which both pick their tiling (and split-K) by
the number of rows. Here every output element is one program's fp32 sum over K in ascending order,
with no split-K and no autotuning. The tile config may change with M only where that leaves a row's
bits alone: ``kernels/invariant_matmul_configs.py`` runs a config measured for the row count once
this process has verified it gives the reference config's bits (the reference depends on the weight
alone), else the reference. Inputs bf16/fp16 (fp32 accumulate), or fp32 with exact fp32 products.
"""

from __future__ import annotations

import torch

from kernels._common import await_inputs, cdiv, interpreting, launch_overlap, tl, triton, use_triton
from kernels.invariant_matmul_configs import MatmulConfig, config_for

__all__ = ["MatmulConfig", "invariant_matmul", "invariant_matmul_torch"]

GROUP_M = 8  # programs walk GROUP_M row tiles per column slab (L2 reuse); order only, not numerics


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
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
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
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, config: MatmulConfig
) -> torch.Tensor:
    if x.stride(-1) != 1 or weight.stride(-1) != 1:
        raise ValueError("invariant_matmul needs x and weight contiguous in K")
    rows, k = x.shape
    n = weight.shape[0]
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows == 0 or n == 0:
        return out
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
        **launch_overlap(x.device, x.shape[0]),
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
    GPU scripts only): another tile config than ``config_for``'s."""
    _check(x, weight, bias)
    if use_triton(x, weight):
        rows, k = x.shape
        return _launch(x, weight, bias, config or config_for(x.dtype, weight.shape[0], k, rows, x.device))
    return invariant_matmul_torch(x, weight, bias)
