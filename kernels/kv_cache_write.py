"""Scatter this step's keys and values into the paged KV cache.

Cache layout per layer: ``[num_blocks, block_size, num_kv_heads, head_dim]``; token ``t`` goes to
slot ``slot_mapping[t] = block_id * block_size + offset``; slot ``-1`` skips the token (padding,
or a token whose KV is already cached).
"""

from __future__ import annotations

import torch

from kernels._common import await_inputs, launch_overlap, next_power_of_2, tl, triton, use_triton
from kernels.step_memo import StepMemo

__all__ = ["write_kv_cache", "write_kv_cache_torch"]


@triton.jit
def _write_kv_cache_kernel(
    key_ptr,
    value_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    key_token_stride,
    key_head_stride,
    value_token_stride,
    value_head_stride,
    num_heads,
    head_dim,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot >= 0:
        heads = tl.arange(0, BLOCK_H)[:, None]
        dims = tl.arange(0, BLOCK_D)[None, :]
        mask = (heads < num_heads) & (dims < head_dim)
        cache_offsets = slot * num_heads * head_dim + heads * head_dim + dims
        key = tl.load(key_ptr + token * key_token_stride + heads * key_head_stride + dims, mask=mask)
        tl.store(k_cache_ptr + cache_offsets, key.to(k_cache_ptr.dtype.element_ty), mask=mask)
        value = tl.load(value_ptr + token * value_token_stride + heads * value_head_stride + dims, mask=mask)
        tl.store(v_cache_ptr + cache_offsets, value.to(v_cache_ptr.dtype.element_ty), mask=mask)


def check_caches_contiguous(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """The kernels address a cache by slot arithmetic alone, so it must be one dense block."""
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("k_cache and v_cache must be contiguous")


def _check(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    if key.dim() != 3 or value.shape != key.shape:
        raise ValueError(f"key/value must both be [T, Hk, D], got {tuple(key.shape)} / {tuple(value.shape)}")
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError(
            f"caches must both be [blocks, block_size, Hk, D], got {tuple(k_cache.shape)} / {tuple(v_cache.shape)}"
        )
    if k_cache.shape[2:] != key.shape[1:]:
        raise ValueError(
            f"cache heads/dim {tuple(k_cache.shape[2:])} != key heads/dim {tuple(key.shape[1:])}"
        )
    if slot_mapping.shape != (key.shape[0],) or slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"slot_mapping must be int [T={key.shape[0]}], got {tuple(slot_mapping.shape)}")
    check_caches_contiguous(k_cache, v_cache)


def _launch(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    if key.stride(-1) != 1 or value.stride(-1) != 1:
        raise ValueError("key and value must be contiguous in head_dim")
    tokens, num_heads, head_dim = key.shape
    if tokens == 0:
        return
    _write_kv_cache_kernel[(tokens,)](
        key,
        value,
        k_cache,
        v_cache,
        slot_mapping,
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        num_heads,
        head_dim,
        BLOCK_H=next_power_of_2(num_heads),
        BLOCK_D=next_power_of_2(head_dim),
        num_warps=4,
        **launch_overlap(key.device, key.shape[0]),
    )


def _slots(slot_mapping: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The slots as int64, and which to keep (None: all)."""
    slots = slot_mapping.long()
    keep = slots >= 0
    return slots, None if bool(keep.all()) else keep


_step_slots = StepMemo(_slots, tensors=1)  # every layer of a step writes the same slots


def write_kv_cache_torch(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    slots, keep = _step_slots(slot_mapping)
    if keep is not None:  # padding rows: rare, and boolean indexing costs a decode step dearly
        slots, key, value = slots[keep], key[keep], value[keep]
    both = _both_halves(k_cache, v_cache)
    if both is not None:  # one write for keys and values: one scatter's dispatch, not two
        both.index_copy_(1, slots, torch.stack((_as(key, k_cache.dtype), _as(value, v_cache.dtype))))
        return
    k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, _as(key, k_cache.dtype))
    v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, _as(value, v_cache.dtype))


def _both_halves(k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor | None:
    """``[2, blocks * block_size, Hk, D]`` over both caches when they are the two halves of one
    tensor (a layer's ``[2, blocks, block_size, Hk, D]`` cache, as the model runner allocates it).
    Remembered on the key cache itself (so it goes with it), for the value cache it was made with."""
    memo = getattr(k_cache, "_kv_both", None)
    if memo is not None and memo[0] is v_cache:
        return memo[1]
    both = None
    if (
        k_cache.dtype == v_cache.dtype
        and k_cache.shape == v_cache.shape
        and k_cache.is_contiguous()
        and v_cache.is_contiguous()
        and k_cache.untyped_storage().data_ptr() == v_cache.untyped_storage().data_ptr()
        and v_cache.storage_offset() == k_cache.storage_offset() + k_cache.numel()
    ):
        shape = (2, k_cache.shape[0] * k_cache.shape[1], *k_cache.shape[2:])
        strides = (k_cache.numel(), k_cache.shape[2] * k_cache.shape[3], k_cache.shape[3], 1)
        both = k_cache.as_strided(shape, strides, k_cache.storage_offset())
    k_cache._kv_both = (v_cache, both)
    return both


def _as(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x if x.dtype == dtype else x.to(dtype)  # a no-op .to() still costs a dispatch per layer


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """In place: ``cache.view(-1, Hk, D)[slot_mapping[t]] = key[t]`` for every ``t`` whose slot is >= 0."""
    _check(key, value, k_cache, v_cache, slot_mapping)
    if use_triton(key, value, k_cache, v_cache, slot_mapping):
        _launch(key, value, k_cache, v_cache, slot_mapping)
    else:
        write_kv_cache_torch(key, value, k_cache, v_cache, slot_mapping)
