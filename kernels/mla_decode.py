"""Multi-head latent attention decode over a paged latent cache (the absorbed-weight formulation).

Cache layout per layer: ``[num_blocks, block_size, R + P]``: each token's compressed KV latent ``c``
(its first R values, the key's no-rope part and the value at once, shared by every head) followed
by its rotated key part ``k_rope`` (P values). For one query head ``h`` of sequence ``b``:
``score(t) = (q_latent[b, h] . c_t + q_rope[b, h] . k_rope_t) * scale`` and
``out[b, h] = softmax_t(score) . c_t`` over the sequence's tokens ``0 .. seq_lens[b] - 1``.
"""

from __future__ import annotations

import torch

__all__ = ["check_mla_inputs", "mla_decode", "mla_decode_reference", "write_latent"]


def check_mla_inputs(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    latent_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
) -> None:
    if q_latent.dim() != 3 or q_rope.dim() != 3 or q_rope.shape[:2] != q_latent.shape[:2]:
        raise ValueError(
            f"q_latent/q_rope must be [batch, heads, R] / [batch, heads, P], "
            f"got {tuple(q_latent.shape)} / {tuple(q_rope.shape)}"
        )
    batch, _, rank = q_latent.shape
    rope_dim = q_rope.shape[2]
    if latent_cache.dim() != 3 or latent_cache.shape[2] != rank + rope_dim:
        raise ValueError(
            f"latent_cache must be [blocks, block_size, R + P = {rank + rope_dim}], got {tuple(latent_cache.shape)}"
        )
    if not latent_cache.is_contiguous():
        raise ValueError("latent_cache must be contiguous")
    if (
        block_tables.dim() != 2
        or block_tables.shape[0] != batch
        or block_tables.dtype not in (torch.int32, torch.int64)
    ):
        raise ValueError(
            f"block_tables must be int [batch={batch}, max_blocks], got {tuple(block_tables.shape)}"
        )
    if seq_lens.shape != (batch,) or seq_lens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"seq_lens must be int [batch={batch}], got {tuple(seq_lens.shape)}")


def mla_decode_reference(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    latent_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Gathers each sequence's pages and attends in fp32; a row with no tokens gives zeros."""
    rank = q_latent.shape[2]
    block_size = latent_cache.shape[1]
    out = torch.zeros(q_latent.shape, dtype=q_latent.dtype, device=q_latent.device)
    for b, seq_len in enumerate(seq_lens.tolist()):
        if seq_len <= 0:
            continue
        pages = block_tables[b, : -(-seq_len // block_size)].long()
        tokens = latent_cache.index_select(0, pages).flatten(0, 1)[:seq_len].float()  # [L, R + P]
        latent = tokens[:, :rank]
        scores = (q_latent[b].float() @ latent.t() + q_rope[b].float() @ tokens[:, rank:].t()) * scale
        out[b] = (torch.softmax(scores, dim=-1) @ latent).to(q_latent.dtype)
    return out


def mla_decode(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    latent_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """``q_latent: [B, H, R]``, ``q_rope: [B, H, P]``, one query per sequence -> ``[B, H, R]``."""
    check_mla_inputs(q_latent, q_rope, latent_cache, block_tables, seq_lens)
    return mla_decode_reference(q_latent, q_rope, latent_cache, block_tables, seq_lens, scale)


def write_latent(
    latent_cache: torch.Tensor, slot_mapping: torch.Tensor, c: torch.Tensor, k_rope: torch.Tensor
) -> None:
    """In place: ``latent_cache.view(-1, R + P)[slot_mapping[t]] = cat(c[t], k_rope[t])`` for every
    ``t`` whose slot is >= 0 (slot ``-1``: padding, or a token already cached)."""
    if c.dim() != 2 or k_rope.dim() != 2 or c.shape[0] != k_rope.shape[0]:
        raise ValueError(f"c/k_rope must be [T, R] / [T, P], got {tuple(c.shape)} / {tuple(k_rope.shape)}")
    if latent_cache.dim() != 3 or latent_cache.shape[2] != c.shape[1] + k_rope.shape[1]:
        raise ValueError(f"latent_cache last dim must be R + P, got {tuple(latent_cache.shape)}")
    if slot_mapping.shape != (c.shape[0],) or slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"slot_mapping must be int [T={c.shape[0]}], got {tuple(slot_mapping.shape)}")
    slots = slot_mapping.long()
    rows = torch.cat([c, k_rope], dim=1).to(latent_cache.dtype)
    if bool((slots < 0).any()):
        keep = slots >= 0
        slots, rows = slots[keep], rows[keep]
    latent_cache.view(-1, latent_cache.shape[2]).index_copy_(0, slots, rows)
