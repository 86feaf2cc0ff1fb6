"""Rotary position embedding on token-major q/k, with a cos/sin cache built like HF transformers.

``cos_sin_cache[p] = concat(cos(p * inv_freq), sin(p * inv_freq))``, shape ``[max_pos, head_dim]``,
fp32. Neox style rotates first half against second half (HF ``rotate_half``); GPT-J style rotates
interleaved even/odd pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from kernels._common import (
    await_inputs,
    check_last_dim_contiguous,
    launch_overlap,
    next_power_of_2,
    tl,
    triton,
    use_triton,
)
from kernels.step_memo import StepMemo

__all__ = [
    "build_cos_sin_cache",
    "rotary_embedding",
    "rotary_embedding_torch",
    "yarn_attention_factor",
    "yarn_softmax_scale",
]


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    # Same arithmetic, in the same order, as transformers' _compute_llama3_parameters.
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(scaling: dict) -> float:
    """What YaRN multiplies cos and sin by (``attention_factor``, else from ``factor``, ``mscale``
    and ``mscale_all_dim``), as transformers' _compute_yarn_parameters."""
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor, mscale, mscale_all_dim = scaling["factor"], scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
    return _yarn_mscale(factor)


def yarn_softmax_scale(scaling: dict | None) -> float:
    """DeepSeek's correction of the attention softmax scale under YaRN: ``mscale(factor,
    mscale_all_dim)`` squared (1 without scaling or without ``mscale_all_dim``)."""
    if not scaling or scaling.get("rope_type", scaling.get("type", "default")) == "default":
        return 1.0
    mscale_all_dim = scaling.get("mscale_all_dim")
    if not mscale_all_dim:
        return 1.0
    return _yarn_mscale(scaling["factor"], mscale_all_dim) ** 2


def _yarn_inv_freq(head_dim: int, base: float, scaling: dict, device) -> torch.Tensor:
    # Same arithmetic, in the same order, as transformers' _compute_yarn_parameters.
    factor = scaling["factor"]
    original = scaling["original_max_position_embeddings"]
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (head_dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # no zero-width ramp
    ramp = torch.clamp((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = (1 - ramp).to(device=device, dtype=torch.float)
    pos_freqs = base ** (torch.arange(0, head_dim, 2).to(device=device, dtype=torch.float) / head_dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (factor * pos_freqs)
    return inv_freq_interpolation * (1 - extrapolation_factor) + inv_freq_extrapolation * extrapolation_factor


def build_cos_sin_cache(
    head_dim: int,
    max_position: int,
    base: float,
    scaling: dict | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """fp32 ``[max_position, head_dim]`` cache for plain RoPE, ``linear``, ``llama3`` or ``yarn``
    scaling (YaRN's attention factor folded into cos and sin)."""
    if head_dim <= 0 or head_dim % 2 != 0:
        raise ValueError(f"head_dim must be a positive even number, got {head_dim}")
    if max_position <= 0:
        raise ValueError(f"max_position must be positive, got {max_position}")
    rope_type = "default"
    attention_factor = 1.0
    if scaling:
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    inv_freq = 1.0 / (
        base
        ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / head_dim)
    )
    if rope_type == "llama3":
        missing = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"} - set(
            scaling
        )
        if missing:
            raise ValueError(f"llama3 rope scaling is missing {sorted(missing)}")
        inv_freq = _llama3_inv_freq(inv_freq, scaling)
    elif rope_type == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif rope_type == "yarn":
        missing = {"factor", "original_max_position_embeddings"} - set(scaling)
        if missing:
            raise ValueError(f"yarn rope scaling is missing {sorted(missing)}")
        inv_freq = _yarn_inv_freq(head_dim, base, scaling, device)
        attention_factor = yarn_attention_factor(scaling)
    elif rope_type != "default":
        raise ValueError(
            f"unsupported rope scaling type {rope_type!r} (supported: default, linear, llama3, yarn)"
        )
    positions = torch.arange(max_position, device=device, dtype=torch.int64).float()
    freqs = positions[:, None] * inv_freq[None, :]
    cos, sin = freqs.cos(), freqs.sin()
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    return torch.cat((cos, sin), dim=-1).contiguous()


@triton.jit
def token_rotation(
    positions_ptr,
    token,
    cos_sin_ptr,
    cos_sin_row_stride,
    half_dim,
    IS_NEOX: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    """cos and sin at ``token``'s position, the offsets of each rotated pair's two elements in a
    head (first half against second half, or even against odd), and the mask of valid pairs."""
    position = tl.load(positions_ptr + token).to(tl.int64)
    pairs = tl.arange(0, BLOCK_HALF)
    pair_mask = pairs < half_dim
    cos = tl.load(cos_sin_ptr + position * cos_sin_row_stride + pairs, mask=pair_mask, other=0.0)
    sin = tl.load(cos_sin_ptr + position * cos_sin_row_stride + half_dim + pairs, mask=pair_mask, other=0.0)
    if IS_NEOX:
        offs_1 = pairs
        offs_2 = pairs + half_dim
    else:
        offs_1 = 2 * pairs
        offs_2 = 2 * pairs + 1
    return cos, sin, offs_1, offs_2, pair_mask


@triton.jit
def rotate_pairs(src_ptr, heads, head_stride, offs_1, offs_2, mask, cos, sin):
    """Load the two elements of each pair of ``heads`` and rotate them, in fp32 (not yet rounded)."""
    x1 = tl.load(src_ptr + heads[:, None] * head_stride + offs_1[None, :], mask=mask, other=0.0)
    x2 = tl.load(src_ptr + heads[:, None] * head_stride + offs_2[None, :], mask=mask, other=0.0)
    x1f = x1.to(tl.float32)
    x2f = x2.to(tl.float32)
    out_1 = x1f * cos[None, :] - x2f * sin[None, :]
    out_2 = x2f * cos[None, :] + x1f * sin[None, :]
    return out_1, out_2


@triton.jit
def _rotate_heads(
    src_ptr,
    src_head_stride,
    dst_ptr,
    dst_head_stride,
    num_heads,
    cos,
    sin,
    offs_1,
    offs_2,
    pair_mask,
    BLOCK_H: tl.constexpr,
):
    heads = tl.arange(0, BLOCK_H)
    mask = (heads[:, None] < num_heads) & pair_mask[None, :]
    out_1, out_2 = rotate_pairs(src_ptr, heads, src_head_stride, offs_1, offs_2, mask, cos, sin)
    dtype = src_ptr.dtype.element_ty
    tl.store(dst_ptr + heads[:, None] * dst_head_stride + offs_1[None, :], out_1.to(dtype), mask=mask)
    tl.store(dst_ptr + heads[:, None] * dst_head_stride + offs_2[None, :], out_2.to(dtype), mask=mask)


@triton.jit
def _rotary_kernel(
    positions_ptr,
    cos_sin_ptr,
    cos_sin_row_stride,
    q_ptr,
    q_token_stride,
    q_head_stride,
    k_ptr,
    k_token_stride,
    k_head_stride,
    q_out_ptr,
    k_out_ptr,
    num_q_heads,
    num_k_heads,
    half_dim,
    IS_NEOX: tl.constexpr,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HK: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    token = tl.program_id(0).to(tl.int64)
    cos, sin, offs_1, offs_2, pair_mask = token_rotation(
        positions_ptr, token, cos_sin_ptr, cos_sin_row_stride, half_dim, IS_NEOX, BLOCK_HALF
    )
    head_dim = 2 * half_dim
    _rotate_heads(
        q_ptr + token * q_token_stride,
        q_head_stride,
        q_out_ptr + token * num_q_heads * head_dim,
        head_dim,
        num_q_heads,
        cos,
        sin,
        offs_1,
        offs_2,
        pair_mask,
        BLOCK_HQ,
    )
    _rotate_heads(
        k_ptr + token * k_token_stride,
        k_head_stride,
        k_out_ptr + token * num_k_heads * head_dim,
        head_dim,
        num_k_heads,
        cos,
        sin,
        offs_1,
        offs_2,
        pair_mask,
        BLOCK_HK,
    )


def _launch(
    positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor, is_neox: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    for name, t in (("q", q), ("k", k), ("cos_sin_cache", cos_sin_cache)):
        check_last_dim_contiguous(name, t)
    tokens, num_q_heads, head_dim = q.shape
    num_k_heads = k.shape[1]
    q_out = torch.empty((tokens, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    k_out = torch.empty((tokens, num_k_heads, head_dim), dtype=k.dtype, device=k.device)
    if tokens == 0:
        return q_out, k_out
    _rotary_kernel[(tokens,)](
        positions,
        cos_sin_cache,
        cos_sin_cache.stride(0),
        q,
        q.stride(0),
        q.stride(1),
        k,
        k.stride(0),
        k.stride(1),
        q_out,
        k_out,
        num_q_heads,
        num_k_heads,
        head_dim // 2,
        IS_NEOX=is_neox,
        BLOCK_HQ=next_power_of_2(num_q_heads),
        BLOCK_HK=next_power_of_2(num_k_heads),
        BLOCK_HALF=next_power_of_2(head_dim // 2),
        num_warps=4,
        **launch_overlap(positions.device, tokens),
    )
    return q_out, k_out


def _rotate_torch(x: torch.Tensor, angles: _Angles, is_neox: bool) -> torch.Tensor:
    fp32 = x.dtype == torch.float32  # no no-op casts: each still costs a dispatch per layer
    xf = x if fp32 else x.float()
    half = x.shape[-1] // 2
    if is_neox:
        # x * (cos, cos) + (x2, x1) * (-sin, sin): per element the same products and sums as
        # (x1 cos - x2 sin, x2 cos + x1 sin), in 6 ops instead of 9
        swapped = torch.cat((xf[..., half:], xf[..., :half]), dim=-1)
        rotated = xf * angles.cos_both + swapped * angles.sin_signed
        return rotated if fp32 else rotated.to(x.dtype)
    x1, x2 = xf[..., 0::2], xf[..., 1::2]
    out_1 = x1 * angles.cos - x2 * angles.sin
    out_2 = x2 * angles.cos + x1 * angles.sin
    return torch.stack((out_1, out_2), dim=-1).flatten(-2).to(x.dtype)


@dataclass(frozen=True)
class _Angles:
    """A step's rotary angles per token, ``[T, 1, D/2]``, and for the NeoX layout ``[T, 1, D]``."""

    cos: torch.Tensor
    sin: torch.Tensor
    cos_both: torch.Tensor  # (cos, cos)
    sin_signed: torch.Tensor  # (-sin, sin)


def _angles(positions: torch.Tensor, cos_sin_cache: torch.Tensor) -> _Angles:
    cos_sin = cos_sin_cache.index_select(0, positions.long()).float()
    cos, sin = cos_sin.chunk(2, dim=-1)
    cos, sin = cos[:, None, :], sin[:, None, :]
    return _Angles(cos, sin, torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1))


_step_angles = StepMemo(_angles, tensors=2)  # every layer of a step rotates at the same positions


def _side_by_side(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor | None:
    """``[T, Hq + Hk, D]`` over both when ``k``'s heads follow ``q``'s in memory with the same strides
    (both views of one fused projection's output), so one elementwise pass rotates both."""
    heads = q.shape[1]
    if (
        q.dtype != k.dtype
        # a lone token's stride is any value (reshape of a one-row split gives each its own width)
        or (q.shape[0] > 1 and q.stride(0) != k.stride(0))
        or q.stride(1) != k.stride(1)
        or q.stride(2) != 1
        or k.stride(2) != 1
        or q.stride(1) != q.shape[2]
        or k.data_ptr() != q.data_ptr() + heads * q.shape[2] * q.element_size()
        # two tensors the allocator happened to place back to back are not one buffer
        or k.untyped_storage().data_ptr() != q.untyped_storage().data_ptr()
    ):
        return None
    return q.as_strided((q.shape[0], heads + k.shape[1], q.shape[2]), q.stride())


def rotary_embedding_torch(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    angles = _step_angles(positions, cos_sin_cache)
    both = _side_by_side(q, k)
    if both is None:
        return _rotate_torch(q, angles, is_neox), _rotate_torch(k, angles, is_neox)
    rotated = _rotate_torch(both, angles, is_neox)
    heads = q.shape[1]
    return rotated[:, :heads].contiguous(), rotated[:, heads:].contiguous()  # no copy at one token


def rotary_embedding(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q: [T, Hq, D]`` and ``k: [T, Hk, D]`` at ``positions: [T]``; returns new tensors."""
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(f"q must be [T, Hq, D] and k [T, Hk, D], got {tuple(q.shape)} and {tuple(k.shape)}")
    if positions.shape != (q.shape[0],):
        raise ValueError(f"positions must be [T={q.shape[0]}], got {tuple(positions.shape)}")
    if positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"positions must be an integer tensor, got {positions.dtype}")
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] != q.shape[2]:
        raise ValueError(f"cos_sin_cache must be [max_pos, {q.shape[2]}], got {tuple(cos_sin_cache.shape)}")
    if use_triton(positions, q, k, cos_sin_cache):
        return _launch(positions, q, k, cos_sin_cache, is_neox)
    return rotary_embedding_torch(positions, q, k, cos_sin_cache, is_neox)
