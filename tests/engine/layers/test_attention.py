"""PagedAttention rotates q/k and fills the cache in one kernel: same result as the three-step path."""

import pytest
import torch

from engine.layers.attention import AttentionMetadata, PagedAttention
from engine.layers.rotary import RotaryEmbedding
from kernels import _common
from kernels.kv_cache_write import write_kv_cache
from kernels.paged_attention import paged_attention, paged_attention_decode
from kernels.rotary import rotary_embedding

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK = 4, 2, 16, 16


def make_layer():
    rotary = RotaryEmbedding(HEAD_DIM, 128, 10000.0, None, torch.device("cpu"))
    attn = PagedAttention(Q_HEADS, KV_HEADS, HEAD_DIM, HEAD_DIM**-0.5, None, rotary)
    attn.k_cache = torch.randn(6, BLOCK, KV_HEADS, HEAD_DIM)
    attn.v_cache = torch.randn_like(attn.k_cache)
    return attn


def step(decode_only: bool):
    """Sequence 0 has 20 cached tokens in blocks 0-1; sequence 1 is new and lives in blocks 3-4."""
    if decode_only:
        positions, lens, slots = torch.tensor([20, 0]), [1, 1], torch.tensor([20, 48])
        seq_lens = [21, 1]
    else:
        positions = torch.cat([torch.tensor([20, 21]), torch.arange(17)])
        lens, slots = [2, 17], torch.cat([torch.tensor([20, 21]), torch.arange(48, 65)])
        seq_lens = [22, 17]
    meta = AttentionMetadata(
        slot_mapping=slots,
        block_tables=torch.tensor([[0, 1], [3, 4]], dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        query_start_loc=torch.tensor([0, lens[0], sum(lens)], dtype=torch.int32),
        decode_only=decode_only,
    )
    return positions, meta


@pytest.mark.parametrize("kernels", ["torch", "triton"])
@pytest.mark.parametrize("decode_only", [True, False], ids=["decode", "mixed-prefill"])
def test_forward_matches_rotary_then_write_then_attend(monkeypatch, kernels, decode_only):
    monkeypatch.setattr(_common._switch, "mode", kernels)
    positions, meta = step(decode_only)
    tokens = positions.shape[0]
    qkv = torch.randn(tokens, (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM)
    q, k, v = qkv.split([Q_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
    q, k, v = (t.view(tokens, -1, HEAD_DIM) for t in (q, k, v))
    attn = make_layer()
    k_cache, v_cache = attn.k_cache.clone(), attn.v_cache.clone()

    q_rot, k_rot = rotary_embedding(positions, q, k, attn.rotary.cos_sin_cache)
    write_kv_cache(k_rot, v.contiguous(), k_cache, v_cache, meta.slot_mapping)
    paged = (q_rot, k_cache, v_cache, meta.block_tables, meta.seq_lens)
    if decode_only:
        expected = paged_attention_decode(*paged, attn.scale, None)
    else:
        expected = paged_attention(*paged, meta.query_start_loc, attn.scale, None)

    out = attn(positions, q, k, v, meta)
    assert torch.equal(out, expected)
    assert torch.equal(attn.k_cache, k_cache) and torch.equal(attn.v_cache, v_cache)
