"""Paged multi-head latent attention for one layer: owns the layer's latent cache (each token's
normalized latent ``c`` and rotated shared key part ``k_rope``, ``[blocks, block_size, R + P]``) and
attends over it.

One-token rows use the absorbed-weight formulation: the query's no-rope part goes into latent space
through the key half of ``kv_b_proj`` (``W_uk``), attention runs over the latents themselves
(``kernels.mla_decode``), and the value half (``W_uv``) lifts the result back to per-head values; no
per-head key or value is ever formed. Requests feeding more tokens use the expanded formulation:
their latents are expanded through ``kv_b_proj`` into per-head keys and values for causal attention,
which costs less than absorption when many queries share the context. A mixed step (decode rows next
to prefill chunks) sends its decode rows through one batched absorbed call and only its prefill
requests through the expanded one: their contexts expanded together, the causal attention in one
flash-attention call per group of them on CUDA (one request at a time elsewhere).

In batch-invariant mode where Triton does not run (CPU) every row, prompt or decode, takes the
absorbed formulation through ``kernels.cpu_invariant`` (one request at a time, keys in
position-aligned blocks): the two
formulations round differently, and which one a token took would otherwise follow how it was
scheduled (a last prompt token alone in a step, after a cached prefix, is a one-token row).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from engine.layers.attention import AttentionMetadata
from engine.layers.batch_invariant import batch_invariant
from engine.layers.norm import RMSNorm
from engine.layers.rotary import RotaryEmbedding
from kernels import cpu_invariant
from kernels._common import cdiv, use_triton
from kernels.head_gemv import MAX_ROWS as HEAD_GEMV_ROWS
from kernels.head_gemv import head_gemv, head_gemv_torch
from kernels.latent_rope_write import latent_rope_write
from kernels.mla_decode import gather_latents, mla_decode
from kernels.varlen_attention import causal_varlen, varlen_available


class LatentAttention(nn.Module):
    sliding_window = None  # MLA layers attend over the whole context

    def __init__(
        self,
        num_heads: int,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        v_head_dim: int,
        scale: float,
        rotary: RotaryEmbedding,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.v_head_dim = v_head_dim
        self.scale = scale
        self.rotary = rotary
        self.latent_cache: torch.Tensor | None = None  # bound by the model runner

    def bind_kv_cache(self, cache: torch.Tensor) -> None:
        """``cache``: this layer's one tensor, shaped by its MLASpec as [blocks, block_size, R + P]."""
        width = self.kv_lora_rank + self.qk_rope_head_dim
        if cache.dim() != 3 or cache.shape[2] != width:
            raise ValueError(
                f"KV cache of shape {tuple(cache.shape)} does not fit a latent of {self.kv_lora_rank} "
                f"+ rope {self.qk_rope_head_dim} values per token"
            )
        self.latent_cache = cache

    def forward(
        self,
        positions: torch.Tensor,
        q_nope: torch.Tensor,
        q_rope: torch.Tensor,
        latent: torch.Tensor,
        latent_norm: RMSNorm,
        kv_b_weight: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """``q_nope: [T, H, N]``, ``q_rope: [T, H, P]`` (before rotary), ``latent: [T, R + P]`` (each
        token's ``c`` before ``latent_norm``, then its ``k_rope`` before rotary), ``kv_b_weight:
        [H * (N + V), R]`` (this rank's heads) -> per-head attention output ``[T, H, V]``."""
        if self.latent_cache is None:
            raise RuntimeError("KV cache is not bound to this attention layer")
        # The norm, both rotations and the cache write in one pass (kernels/latent_rope_write.py).
        q_rope, c, k_rope = latent_rope_write(
            positions, q_rope, latent, latent_norm.weight, latent_norm.eps, self.rotary.cos_sin_cache,
            self.rotary.is_neox, self.latent_cache, meta.slot_mapping,
        )  # fmt: skip
        if batch_invariant() and not use_triton(q_nope, self.latent_cache):
            return self._row_invariant(q_nope, q_rope, kv_b_weight, meta)
        if meta.decode_only:
            return self._absorbed(q_nope, q_rope, kv_b_weight, meta.block_tables, meta.seq_lens)
        out = self._expanded(q_nope, q_rope, c, k_rope, kv_b_weight, meta)
        rows = meta.decode_rows
        if rows is not None:
            absorbed = self._absorbed(
                q_nope.index_select(0, rows.token_rows),
                q_rope.index_select(0, rows.token_rows),
                kv_b_weight,
                rows.block_tables,
                rows.seq_lens,
            )
            out.index_copy_(0, rows.token_rows, absorbed)
        return out

    def _absorbed(
        self,
        q_nope: torch.Tensor,
        q_rope: torch.Tensor,
        kv_b_weight: torch.Tensor,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
    ) -> torch.Tensor:
        """One query per request: ``q_nope: [D, H, N]``, ``q_rope: [D, H, P]`` -> ``[D, H, V]``."""
        w = kv_b_weight.view(self.num_heads, self.qk_nope_head_dim + self.v_head_dim, self.kv_lora_rank)
        w_uk, w_uv = w[:, : self.qk_nope_head_dim], w[:, self.qk_nope_head_dim :]
        # A few rows: per-head GEMVs (Triton, launched behind the kernel before them); more rows, or
        # batch-invariant mode (one product for every batch size): torch's batched GEMM.
        lift = head_gemv if q_nope.shape[0] <= HEAD_GEMV_ROWS and not batch_invariant() else head_gemv_torch
        q_latent = lift(q_nope, w_uk)
        latent_out = mla_decode(
            q_latent, q_rope.contiguous(), self.latent_cache, block_tables, seq_lens, self.scale
        )
        return lift(latent_out, w_uv.transpose(1, 2))

    def _row_invariant(
        self, q_nope: torch.Tensor, q_rope: torch.Tensor, kv_b_weight: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """The absorbed formulation for every row, one request at a time -> ``[T, H, V]``."""
        w = kv_b_weight.view(self.num_heads, self.qk_nope_head_dim + self.v_head_dim, self.kv_lora_rank)
        w_uk, w_uv = w[:, : self.qk_nope_head_dim], w[:, self.qk_nope_head_dim :]
        q_latent = cpu_invariant.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # [T, H, R]
        queries = torch.cat((q_latent, q_rope.to(q_latent.dtype)), dim=-1)
        latent_out = q_latent.new_empty(q_latent.shape)
        starts = meta.query_start_loc.tolist()
        for b, context_len in enumerate(meta.seq_lens.tolist()):
            start, stop = starts[b], starts[b + 1]
            if stop == start:
                continue
            tokens = gather_latents(self.latent_cache, meta.block_tables[b], context_len).unsqueeze(1)
            latent_out[start:stop] = cpu_invariant.attend(
                queries[start:stop], tokens, tokens[..., : self.kv_lora_rank], self.scale
            )
        return cpu_invariant.bmm(latent_out.transpose(0, 1), w_uv.transpose(1, 2)).transpose(0, 1)

    def _expanded(
        self,
        q_nope: torch.Tensor,
        q_rope: torch.Tensor,
        c: torch.Tensor,
        k_rope: torch.Tensor,
        kv_b_weight: torch.Tensor,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """The step's output ``[T, H, V]`` with the rows of every request the absorbed call does not
        take filled (lengths read from the host copies: no device read per request); a step of one
        fresh request is its attention as it comes, without a copy. The requests' contexts are
        packed and expanded together, in groups of at most ``EXPANSION_TOKENS`` context tokens (one
        ``kv_b_proj`` product each): a request with nothing cached brings its own rows of this
        step, the others their pages. On CUDA each group attends in one flash-attention call over
        the packed contexts (``kernels.varlen_attention``), elsewhere request by request."""
        if meta.host_query_lens is None or meta.host_seq_lens is None:
            raise ValueError(
                "a step with prefill rows needs host_query_lens and host_seq_lens (build_inputs fills them)"
            )
        q = torch.cat((q_nope, q_rope), dim=-1)
        absorbed_one_token_rows = meta.decode_rows is not None
        requests, stop = [], 0
        for b, (n, context_len) in enumerate(zip(meta.host_query_lens, meta.host_seq_lens, strict=True)):
            start, stop = stop, stop + n
            if n and not (n == 1 and absorbed_one_token_rows):
                requests.append((b, start, n, context_len))
        if len(requests) == 1 and requests[0][2] == requests[0][3] == q.shape[0]:
            k, v = self._expand(c, k_rope, kv_b_weight)
            return self._causal(q, k, v)
        out = q_nope.new_empty(q_nope.shape[0], self.num_heads, self.v_head_dim)
        varlen = varlen_available(q, q.shape[-1])
        for group in _groups_of_context(requests, EXPANSION_TOKENS):
            k, v = self._expand(*self._contexts(group, c, k_rope, meta), kv_b_weight)
            if varlen:
                rows = _rows(group, q.device)
                attended = causal_varlen(
                    q[rows], k, v, [r[2] for r in group], [r[3] for r in group], self.scale
                )
                out[rows] = attended
                continue
            first = 0
            for _, start, n, context_len in group:
                context = slice(first, first + context_len)
                out[start : start + n] = self._causal(q[start : start + n], k[context], v[context])
                first += context_len
        return out

    def _contexts(
        self, group: list[tuple], c: torch.Tensor, k_rope: torch.Tensor, meta: AttentionMetadata
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The group's contexts, request after request, as latents ``[L, R]`` and rotated shared
        keys ``[L, P]``: a request with nothing cached (its context is its query rows) from ``c``
        and ``k_rope``, the others from their pages, gathered together."""
        cached = [r for r in group if r[3] != r[2]]
        if not cached and _contiguous(group):  # fresh prompts side by side: their rows as they are
            rows = slice(group[0][1], group[-1][1] + group[-1][2])
            return c[rows], k_rope[rows]
        block_size = self.latent_cache.shape[1]
        pages = {}
        if cached:
            counts = [cdiv(r[3], block_size) for r in cached]
            page_ids = torch.cat(
                [meta.block_tables[r[0], :count] for r, count in zip(cached, counts, strict=True)]
            )
            tokens = self.latent_cache.index_select(0, page_ids.long()).flatten(0, 1)
            firsts = [0, *itertools.accumulate(block_size * count for count in counts[:-1])]
            pages = {r[0]: tokens[first : first + r[3]] for r, first in zip(cached, firsts, strict=True)}
        latents, key_ropes = [], []
        for b, start, n, _ in group:
            if b in pages:
                latent, key_rope = pages[b].split([self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
            else:
                latent, key_rope = c[start : start + n], k_rope[start : start + n]
            latents.append(latent)
            key_ropes.append(key_rope)
        return torch.cat(latents), torch.cat(key_ropes)

    def _expand(
        self, latent: torch.Tensor, key_rope: torch.Tensor, kv_b_weight: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Latents ``[L, R]`` and rotated shared keys ``[L, P]`` -> per-head keys ``[L, H, N + P]`` and
        values ``[L, H, V]`` through ``kv_b_proj``."""
        kv = F.linear(latent, kv_b_weight).view(latent.shape[0], self.num_heads, -1)
        k_nope, v = kv.split([self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k = torch.cat((k_nope, key_rope.unsqueeze(1).expand(-1, self.num_heads, -1)), dim=-1)
        return k, v

    def _causal(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Causal attention of ``q: [n, H, N + P]``, the last ``n`` positions of a context whose keys
        and values are ``k: [L, H, N + P]`` and ``v: [L, H, V]``."""
        n, context_len = q.shape[0], k.shape[0]
        if v.data_ptr() % 16:  # a split view of kv_b_proj's output at a small key width (tests' tiny heads):
            v = v.contiguous()  # SDPA's CUDA kernels read it misaligned (wrong values, or a CUDA error)
        mask = None
        if n > 1 and n != context_len:  # torch's is_causal aligns top-left: right only without a prefix
            key_positions = torch.arange(context_len, device=q.device)
            query_positions = torch.arange(context_len - n, context_len, device=q.device).unsqueeze(1)
            mask = key_positions <= query_positions
        o = F.scaled_dot_product_attention(
            q.transpose(0, 1).unsqueeze(0),
            k.transpose(0, 1).unsqueeze(0),
            v.transpose(0, 1).unsqueeze(0),
            attn_mask=mask,
            is_causal=n > 1 and n == context_len,
            scale=self.scale,
        )
        return o[0].transpose(0, 1)


# Context tokens expanded at once in a prefill step: 32k tokens of DeepSeek-V2-Lite's 16 heads hold
# 335 MB of keys and values (a longer context is expanded alone, as before).
EXPANSION_TOKENS = 1 << 15


def _contiguous(group: list[tuple]) -> bool:
    """Whether the requests' query rows follow each other in the step."""
    return all(a[1] + a[2] == b[1] for a, b in itertools.pairwise(group))


def _rows(group: list[tuple], device: torch.device) -> slice | torch.Tensor:
    """The requests' query rows in the step: a slice when they follow each other."""
    if _contiguous(group):
        return slice(group[0][1], group[-1][1] + group[-1][2])
    index = [row for _, start, n, _ in group for row in range(start, start + n)]
    return torch.tensor(index, device=device)


def _groups_of_context(requests: list[tuple], budget: int) -> list[list[tuple]]:
    """``requests`` ((batch row, first query row, query rows, context length) each) in order, cut into
    runs whose context lengths sum to at most ``budget`` (a longer one alone)."""
    groups, total = [], budget
    for request in requests:
        if total + request[3] > budget:
            groups.append([])
            total = 0
        groups[-1].append(request)
        total += request[3]
    return groups
