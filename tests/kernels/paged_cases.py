"""Shared inputs and a float64 oracle for the paged-attention tests.

Not a test module itself; both test_paged_attention.py and test_paged_attention_decode.py use it.
"""

import math

import torch

BLOCK_SIZE = 16


def make_cache(
    seq_lens, kv_heads, head_dim, dtype, device, num_blocks=None, pad_blocks=1, block_size=BLOCK_SIZE
):
    """Random caches plus block tables that hand each sequence a shuffled, non-contiguous block list."""
    blocks_needed = [math.ceil(n / block_size) for n in seq_lens]
    total = sum(blocks_needed)
    num_blocks = num_blocks or total + 3
    k_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, device=device).to(dtype)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, device=device).to(dtype)
    order = torch.randperm(num_blocks)[:total].tolist()
    max_blocks = max(blocks_needed) + pad_blocks
    # Unused table entries hold an id past the cache end: reading them would fault or show up as garbage.
    block_tables = torch.full((len(seq_lens), max_blocks), num_blocks + 1000, dtype=torch.int32)
    for b, count in enumerate(blocks_needed):
        block_tables[b, :count] = torch.tensor(order[:count], dtype=torch.int32)
        order = order[count:]
    seq_lens_t = torch.tensor(seq_lens, dtype=torch.int32)
    return k_cache, v_cache, block_tables.to(device), seq_lens_t.to(device)


def naive_attention(
    q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, sliding_window=None, softcap=None
):
    """float64, one query row and head at a time, straight from the definition; ``softcap``: scores
    become ``softcap * tanh(score / softcap)`` (Gemma-2)."""
    num_q_heads = q.shape[1]
    group = num_q_heads // k_cache.shape[2]
    out = torch.zeros(q.shape, dtype=torch.float64)
    starts = query_start_loc.tolist()
    for b, seq_len in enumerate(seq_lens.tolist()):
        q_len = starts[b + 1] - starts[b]
        slots = [(int(block_tables[b, j // BLOCK_SIZE]), j % BLOCK_SIZE) for j in range(seq_len)]
        keys = torch.stack([k_cache[blk, off] for blk, off in slots]).double().cpu()
        values = torch.stack([v_cache[blk, off] for blk, off in slots]).double().cpu()
        for i in range(q_len):
            position = seq_len - q_len + i
            low = 0 if sliding_window is None else max(0, position - sliding_window + 1)
            row = q[starts[b] + i].double().cpu()
            for h in range(num_q_heads):
                k = keys[low : position + 1, h // group]
                v = values[low : position + 1, h // group]
                scores = k @ row[h] * scale
                if softcap is not None:
                    scores = softcap * torch.tanh(scores / softcap)
                weights = torch.softmax(scores, dim=0)
                out[starts[b] + i, h] = weights @ v
    return out
