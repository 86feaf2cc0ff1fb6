"""Gated activations on the fused gate/up projection output ``x = [gate | up]``: SwiGLU's
``silu(gate) * up`` and Gemma's GeGLU ``gelu_tanh(gate) * up`` (the tanh approximation,
transformers' ``gelu_pytorch_tanh``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels._common import await_inputs, cdiv, launch_overlap, tanh, tl, triton, use_triton

__all__ = ["gelu_tanh_and_mul", "gelu_tanh_and_mul_torch", "silu_and_mul", "silu_and_mul_torch"]

_BLOCK = 1024


@triton.jit
def _act_and_mul_kernel(
    x_ptr,
    x_row_stride,
    out_ptr,
    out_row_stride,
    inter,
    GELU_TANH: tl.constexpr,
    BLOCK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * x_row_stride + inter + cols, mask=mask, other=0.0)
    if GELU_TANH:  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), as torch's
        inner = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        act = 0.5 * gate * (1.0 + tanh(inner))
    else:
        act = gate * tl.sigmoid(gate)
    # Round the activation to the input dtype before the product, as the torch reference (and HF) does.
    act = act.to(up.dtype).to(tl.float32)
    tl.store(out_ptr + row * out_row_stride + cols, (act * up.to(tl.float32)).to(up.dtype), mask=mask)


def _launch(x: torch.Tensor, gelu_tanh: bool) -> torch.Tensor:
    if x.stride(-1) != 1:
        raise ValueError("gated activations need rows contiguous in memory")
    tokens, width = x.shape
    inter = width // 2
    out = torch.empty((tokens, inter), dtype=x.dtype, device=x.device)
    if tokens == 0 or inter == 0:
        return out
    _act_and_mul_kernel[(tokens, cdiv(inter, _BLOCK))](
        x,
        x.stride(0),
        out,
        out.stride(0),
        inter,
        GELU_TANH=gelu_tanh,
        BLOCK=_BLOCK,
        num_warps=4,
        **launch_overlap(x.device, tokens),
    )
    return out


def _check(x: torch.Tensor) -> None:
    if x.dim() != 2 or x.shape[1] % 2 != 0:
        raise ValueError(f"x must be [tokens, 2*intermediate], got shape {tuple(x.shape)}")


def silu_and_mul_torch(x: torch.Tensor) -> torch.Tensor:
    inter = x.shape[-1] // 2
    return F.silu(x[..., :inter]) * x[..., inter:]


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``x: [T, 2*I]`` -> ``[T, I]``."""
    _check(x)
    if use_triton(x):
        return _launch(x, gelu_tanh=False)
    return silu_and_mul_torch(x)


def gelu_tanh_and_mul_torch(x: torch.Tensor) -> torch.Tensor:
    inter = x.shape[-1] // 2
    return F.gelu(x[..., :inter], approximate="tanh") * x[..., inter:]


def gelu_tanh_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``x: [T, 2*I]`` -> ``[T, I]``."""
    _check(x)
    if use_triton(x):
        return _launch(x, gelu_tanh=True)
    return gelu_tanh_and_mul_torch(x)
