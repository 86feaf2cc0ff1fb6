"""Paged attention for one layer: rotate q/k and write this step's K/V into the cache (one kernel),
then attend over the cache. In batch-invariant mode every step, prompt or decode, attends through
``kernels/invariant_attention.py`` wherever Triton runs."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from engine.layers.batch_invariant import batch_invariant
from engine.layers.rotary import RotaryEmbedding
from kernels._common import use_triton
from kernels.invariant_attention import invariant_attention
from kernels.paged_attention import paged_attention, paged_attention_decode
from kernels.rope_kv_write import QKNorm, rope_and_write_kv

# Short prompts avoid cuDNN's attention: it builds an execution plan per new sequence length, and
# prompts come in every length (on the H200 the first 1,024-token prefills of a process spent ~12 ms
# of host time per layer). Long prompts keep torch's default choice: at 8,192 tokens it prefilled
# 38.7k tok/s against 34.8k with flash alone, and a plan costs little next to such a prefill.
_SHORT_PREFILL_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
_LONG_PREFILL = 4096


@dataclass
class DecodeRows:
    """The requests of a mixed step that feed one token each, as a decode batch of their own: layers
    whose decode attends another way than their prefill (multi-head latent attention) batch them."""

    token_rows: torch.Tensor  # int64 [D]: each one's row among the step's T tokens
    block_tables: torch.Tensor  # int32 [D, max_blocks]
    seq_lens: torch.Tensor  # int32 [D], context including this step's token


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # int64 [T]
    block_tables: torch.Tensor  # int32 [B, max_blocks]
    seq_lens: torch.Tensor  # int32 [B], context including this step's tokens
    query_start_loc: torch.Tensor  # int32 [B + 1]
    decode_only: bool  # every request feeds exactly one token
    # Query lengths when every request is a fresh prompt (nothing cached before this step): on CUDA
    # such steps attend with torch's fused SDPA (flash) kernel over this step's own q/k/v.
    fresh_prefill_lens: list[int] | None = None
    # Host copies of each request's query length and of seq_lens, from the model runner's input
    # preparation (None where a step is built without them: CUDA-graph decode steps).
    host_query_lens: list[int] | None = None
    host_seq_lens: list[int] | None = None
    # Set only in a step mixing one-token requests with longer ones.
    decode_rows: DecodeRows | None = None
    # The window group's tables (engine/kv/layout.py), which sliding-window layers read instead:
    # set when those layers keep only their windows beside full-attention layers.
    window: AttentionMetadata | None = None


class KVCacheLayer(Protocol):
    """A layer that owns one KV cache tensor, shaped by its layer's KVCacheSpec: PagedAttention, or
    multi-head latent attention's LatentAttention. The model runner allocates and binds it."""

    sliding_window: int | None

    def bind_kv_cache(self, cache: torch.Tensor) -> None: ...


class PagedAttention(nn.Module):
    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scale: float,
        sliding_window: int | None,
        rotary: RotaryEmbedding,
        softcap: float | None = None,  # scores become softcap * tanh(score / softcap) (Gemma-2)
    ) -> None:
        super().__init__()
        self.rotary = rotary
        self.softcap = softcap
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale
        self.sliding_window = sliding_window
        self.k_cache: torch.Tensor | None = None  # bound by the model runner
        self.v_cache: torch.Tensor | None = None

    def bind_kv_cache(self, cache: torch.Tensor) -> None:
        """``cache``: this layer's one tensor, shaped by its FullAttentionSpec (or SlidingWindowSpec)
        as [2, blocks, block_size, kv_heads, head_dim]; keys are its first half, values its second."""
        if cache.dim() != 5 or cache.shape[0] != 2 or cache.shape[3:] != (self.num_kv_heads, self.head_dim):
            raise ValueError(
                f"KV cache of shape {tuple(cache.shape)} does not fit a layer of {self.num_kv_heads} KV "
                f"heads of dim {self.head_dim}"
            )
        self.k_cache, self.v_cache = cache[0], cache[1]

    def forward(
        self,
        positions: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        meta: AttentionMetadata,
        qk_norm: QKNorm | None = None,
    ) -> torch.Tensor:
        """q: [T, Hq, D], k/v: [T, Hk, D] before rotary (views into the fused projection output are
        fine) -> [T, Hq, D]; ``qk_norm``: per-head RMSNorms of q and k, done in the rotary's pass."""
        if self.k_cache is None:
            raise RuntimeError("KV cache is not bound to this attention layer")
        if self.sliding_window is not None and meta.window is not None:
            meta = meta.window
        invariant = batch_invariant() and use_triton(q, self.k_cache)
        fresh = bool(meta.fresh_prefill_lens) and q.is_cuda and self.sliding_window is None and not invariant
        fresh = fresh and self.softcap is None  # torch's SDPA has no soft-capping
        q, k, v = rope_and_write_kv(
            positions,
            q,
            k,
            v,
            self.rotary.cos_sin_cache,
            self.k_cache,
            self.v_cache,
            meta.slot_mapping,
            is_neox=self.rotary.is_neox,
            return_kv=fresh,  # only the SDPA path reads this step's k/v outside the cache
            qk_norm=qk_norm,
        )
        if fresh:
            return self._fresh_prefill(q, k, v, meta.fresh_prefill_lens)
        if invariant:
            return invariant_attention(
                q,
                self.k_cache,
                self.v_cache,
                meta.block_tables,
                meta.seq_lens,
                meta.query_start_loc,
                self.scale,
                self.sliding_window,
                softcap=self.softcap,
                decode_only=meta.decode_only,
            )
        if meta.decode_only:
            return paged_attention_decode(
                q,
                self.k_cache,
                self.v_cache,
                meta.block_tables,
                meta.seq_lens,
                self.scale,
                self.sliding_window,
                softcap=self.softcap,
            )
        return paged_attention(
            q,
            self.k_cache,
            self.v_cache,
            meta.block_tables,
            meta.seq_lens,
            meta.query_start_loc,
            self.scale,
            self.sliding_window,
            softcap=self.softcap,
        )

    def _fresh_prefill(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: list[int]
    ) -> torch.Tensor:
        out = torch.empty_like(q)
        start = 0
        # One backend choice per step (entering the context costs host time per call): a step with
        # a long prompt keeps torch's default for all of its prompts.
        with sdpa_kernel(_SHORT_PREFILL_BACKENDS) if max(lens) < _LONG_PREFILL else nullcontext():
            for n in lens:
                rows = slice(start, start + n)
                # [T, H, D] -> [1, H, T, D]; causal over the prompt itself is the whole context.
                o = F.scaled_dot_product_attention(
                    q[rows].transpose(0, 1).unsqueeze(0),
                    k[rows].transpose(0, 1).unsqueeze(0),
                    v[rows].transpose(0, 1).unsqueeze(0),
                    is_causal=True,
                    scale=self.scale,
                    enable_gqa=self.num_heads != self.num_kv_heads,
                )
                out[rows] = o[0].transpose(0, 1)
                start += n
        return out
