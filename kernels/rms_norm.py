"""RMSNorm and fused residual-add + RMSNorm, matching Hugging Face ``LlamaRMSNorm``.

HF normalises in fp32, casts the result back to the input dtype, and only then multiplies by the
weight; both paths here round at the same two points so bf16 outputs agree bit for bit in most
elements. ``round_normed=False`` is Gemma's order instead (``GemmaRMSNorm``): the fp32 normalised
value times an fp32 weight (``1 + w``), rounded once.
"""

from __future__ import annotations

import torch

from kernels._common import await_inputs, launch_overlap, next_power_of_2, tl, triton, use_triton

__all__ = ["fused_add_rms_norm", "fused_add_rms_norm_torch", "rms_norm", "rms_norm_torch"]


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    x_row_stride,
    residual_ptr,
    residual_row_stride,
    weight_ptr,
    out_ptr,
    out_row_stride,
    residual_out_ptr,
    residual_out_row_stride,
    n_cols,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    ROUND_NORMED: tl.constexpr,
    BLOCK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        residual = tl.load(residual_ptr + row * residual_row_stride + cols, mask=mask, other=0.0)
        x = x.to(residual.dtype)  # rounds a wider x (tensor-parallel fp32 sums); else a no-op
        x = (x.to(tl.float32) + residual.to(tl.float32)).to(x.dtype)
        tl.store(residual_out_ptr + row * residual_out_row_stride + cols, x, mask=mask)
    xf = x.to(tl.float32)
    variance = tl.sum(xf * xf, axis=0) / n_cols
    normed = xf * tl.rsqrt(variance + eps)
    if ROUND_NORMED:
        normed = normed.to(x.dtype).to(tl.float32)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_row_stride + cols, (normed * weight).to(out_ptr.dtype.element_ty), mask=mask)


def _check(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None) -> None:
    if x.dim() != 2:
        raise ValueError(f"x must be [tokens, hidden], got shape {tuple(x.shape)}")
    if weight.shape != (x.shape[1],):
        raise ValueError(f"weight must be [{x.shape[1]}], got {tuple(weight.shape)}")
    if residual is not None and (residual.shape != x.shape or x.dtype not in (residual.dtype, torch.float32)):
        raise ValueError(
            f"residual must match x ({tuple(x.shape)}, {x.dtype}), got {tuple(residual.shape)}, {residual.dtype}"
        )


def _launch(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None,
    round_normed: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    tensors = (x, weight) if residual is None else (x, weight, residual)
    for t in tensors:
        if t.stride(-1) != 1:
            raise ValueError("rms_norm needs rows contiguous in memory")
    n_rows, n_cols = x.shape
    out = torch.empty_like(x if residual is None else residual, memory_format=torch.contiguous_format)
    residual_out = torch.empty_like(out) if residual is not None else None
    if n_rows == 0:
        return out, residual_out
    block = next_power_of_2(n_cols)
    num_warps = min(max(block // 512, 1), 16)
    _rms_norm_kernel[(n_rows,)](
        x,
        x.stride(0),
        residual if residual is not None else x,
        residual.stride(0) if residual is not None else 0,
        weight,
        out,
        out.stride(0),
        residual_out if residual_out is not None else out,
        residual_out.stride(0) if residual_out is not None else 0,
        n_cols,
        eps,
        HAS_RESIDUAL=residual is not None,
        ROUND_NORMED=round_normed,
        BLOCK=block,
        num_warps=num_warps,
        **launch_overlap(x.device, n_rows),
    )
    return out, residual_out


def rms_norm_torch(
    x: torch.Tensor, weight: torch.Tensor, eps: float, round_normed: bool = True
) -> torch.Tensor:
    if x.dtype == torch.float32 and weight.dtype == torch.float32:  # the same ops without the no-op casts
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if not round_normed:
        return (normed * weight.float()).to(x.dtype)
    return (normed.to(x.dtype) * weight).to(x.dtype)


def fused_add_rms_norm_torch(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, round_normed: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    new_residual = (x if x.dtype == residual.dtype else x.to(residual.dtype)) + residual  # no no-op cast
    return rms_norm_torch(new_residual, weight, eps, round_normed), new_residual


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, round_normed: bool = True) -> torch.Tensor:
    """``x * rsqrt(mean(x^2) + eps) * weight`` per row of ``x: [T, H]``; output in ``x.dtype``.
    ``round_normed``: round the normalised value to ``x.dtype`` before the weight (Llama's order)."""
    _check(x, weight, None)
    if use_triton(x, weight):
        return _launch(x, weight, eps, None, round_normed)[0]
    return rms_norm_torch(x, weight, eps, round_normed)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, round_normed: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(rms_norm(x + residual), x + residual)`` as new tensors, in ``residual.dtype``.

    ``x`` may be fp32 over a bf16/fp16 residual (a tensor-parallel all-reduce's sums): it is rounded
    to the residual's dtype first, exactly as a separate cast would, without that cast's launch."""
    _check(x, weight, residual)
    if use_triton(x, residual, weight):
        out, new_residual = _launch(x, weight, eps, residual, round_normed)
        return out, new_residual
    return fused_add_rms_norm_torch(x, residual, weight, eps, round_normed)
