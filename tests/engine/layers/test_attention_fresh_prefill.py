"""The SDPA path for fresh prompts (taken on CUDA) computes what the paged kernels compute."""

import torch

from engine.layers.attention import PagedAttention
from engine.layers.rotary import RotaryEmbedding
from kernels.paged_attention import paged_attention_torch


def test_fresh_prefill_matches_paged_reference():
    torch.manual_seed(0)
    q_heads, kv_heads, head_dim, block = 8, 2, 16, 16
    lens = [5, 19, 1]
    total = sum(lens)
    q = torch.randn(total, q_heads, head_dim)
    k = torch.randn(total, kv_heads, head_dim)
    v = torch.randn(total, kv_heads, head_dim)
    # Lay each prompt's keys out in its own blocks, as the engine's cache write would.
    blocks_per_seq = [-(-n // block) for n in lens]
    k_cache = torch.zeros(sum(blocks_per_seq), block, kv_heads, head_dim)
    v_cache = torch.zeros_like(k_cache)
    tables = torch.zeros(len(lens), max(blocks_per_seq), dtype=torch.int32)
    start, first_block = 0, 0
    for b, n in enumerate(lens):
        for i in range(n):
            blk, off = first_block + i // block, i % block
            k_cache[blk, off], v_cache[blk, off] = k[start + i], v[start + i]
        tables[b, : blocks_per_seq[b]] = torch.arange(first_block, first_block + blocks_per_seq[b])
        start, first_block = start + n, first_block + blocks_per_seq[b]
    query_start_loc = torch.tensor([0, 5, 24, 25], dtype=torch.int32)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    expected = paged_attention_torch(q, k_cache, v_cache, tables, seq_lens, query_start_loc, 0.25)
    rotary = RotaryEmbedding(head_dim, 64, 10000.0, None, torch.device("cpu"))
    attn = PagedAttention(q_heads, kv_heads, head_dim, 0.25, None, rotary)
    actual = attn._fresh_prefill(q, k, v, lens)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
