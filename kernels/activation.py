"""SwiGLU gate: ``silu(x[:, :I]) * x[:, I:]`` on the fused gate/up projection output."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels._common import cdiv, tl, triton, use_triton

__all__ = ["silu_and_mul", "silu_and_mul_torch"]

_BLOCK = 1024


@triton.jit
def _silu_and_mul_kernel(x_ptr, x_row_stride, out_ptr, out_row_stride, inter, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * x_row_stride + inter + cols, mask=mask, other=0.0)
    # Round silu to the input dtype before the product, as the torch reference (and HF) does.
    act = (gate * tl.sigmoid(gate)).to(up.dtype).to(tl.float32)
    tl.store(out_ptr + row * out_row_stride + cols, (act * up.to(tl.float32)).to(up.dtype), mask=mask)


def _launch(x: torch.Tensor) -> torch.Tensor:
    if x.stride(-1) != 1:
        raise ValueError("silu_and_mul needs rows contiguous in memory")
    tokens, width = x.shape
    inter = width // 2
    out = torch.empty((tokens, inter), dtype=x.dtype, device=x.device)
    if tokens == 0 or inter == 0:
        return out
    _silu_and_mul_kernel[(tokens, cdiv(inter, _BLOCK))](
        x, x.stride(0), out, out.stride(0), inter, BLOCK=_BLOCK, num_warps=4
    )
    return out


def silu_and_mul_torch(x: torch.Tensor) -> torch.Tensor:
    inter = x.shape[-1] // 2
    return F.silu(x[..., :inter]) * x[..., inter:]


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``x: [T, 2*I]`` -> ``[T, I]``."""
    if x.dim() != 2 or x.shape[1] % 2 != 0:
        raise ValueError(f"x must be [tokens, 2*intermediate], got shape {tuple(x.shape)}")
    if use_triton(x):
        return _launch(x)
    return silu_and_mul_torch(x)
