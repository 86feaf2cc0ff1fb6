"""Per-layer KV cache specs: bytes per token and per block, cache shapes, and what they refuse."""

import dataclasses

import pytest

from engine.kv.specs import (
    FullAttentionSpec,
    MLASpec,
    SlidingWindowSpec,
    shared_block_size,
    total_block_bytes,
    total_bytes_per_token,
)


def test_full_attention_holds_a_key_and_a_value_per_kv_head():
    spec = FullAttentionSpec(block_size=16, dtype="bfloat16", num_kv_heads=8, head_dim=128)
    assert spec.bytes_per_token == 2 * 8 * 128 * 2
    assert spec.block_bytes == 16 * spec.bytes_per_token
    assert spec.cache_shape(10) == (2, 10, 16, 8, 128)


def test_sliding_window_sizes_like_full_attention_and_keeps_its_window():
    full = FullAttentionSpec(block_size=16, dtype="float32", num_kv_heads=2, head_dim=16)
    windowed = SlidingWindowSpec(block_size=16, dtype="float32", num_kv_heads=2, head_dim=16, window=24)
    assert windowed.window == 24
    assert windowed.bytes_per_token == full.bytes_per_token == 2 * 2 * 16 * 4
    assert windowed.cache_shape(3) == full.cache_shape(3)
    assert windowed != full


def test_mla_stores_one_latent_and_one_rope_key_per_token_for_all_heads():
    # DeepSeek-V3: kv_lora_rank 512 + qk_rope_head_dim 64, bf16 -> 1,152 bytes per token per layer,
    # against 2 * 128 heads * 192 dims * 2 bytes = 98,304 for the same heads uncompressed.
    spec = MLASpec(block_size=64, dtype="bfloat16", kv_lora_rank=512, rope_head_dim=64)
    assert spec.bytes_per_token == 1152
    assert spec.block_bytes == 64 * 1152
    assert spec.cache_shape(5) == (5, 64, 576)


def test_totals_sum_over_layers():
    specs = [
        FullAttentionSpec(block_size=4, dtype="float16", num_kv_heads=2, head_dim=8),
        SlidingWindowSpec(block_size=4, dtype="float16", num_kv_heads=2, head_dim=8, window=16),
        MLASpec(block_size=4, dtype="float16", kv_lora_rank=32, rope_head_dim=8),
    ]
    assert total_bytes_per_token(specs) == 64 + 64 + 80
    assert total_block_bytes(specs) == 4 * (64 + 64 + 80)
    assert shared_block_size(specs) == 4


def test_layers_must_share_one_block_size():
    specs = [
        FullAttentionSpec(block_size=4, dtype="float16", num_kv_heads=2, head_dim=8),
        FullAttentionSpec(block_size=8, dtype="float16", num_kv_heads=2, head_dim=8),
    ]
    with pytest.raises(ValueError, match=r"one block size, got \[4, 8\]"):
        shared_block_size(specs)


def test_specs_are_frozen_and_validated():
    spec = FullAttentionSpec(block_size=16, dtype="float32", num_kv_heads=2, head_dim=16)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.block_size = 8
    with pytest.raises(ValueError, match="block_size"):
        FullAttentionSpec(block_size=0, dtype="float32", num_kv_heads=2, head_dim=16)
    with pytest.raises(ValueError, match="int4"):
        FullAttentionSpec(block_size=16, dtype="int4", num_kv_heads=2, head_dim=16)
    with pytest.raises(ValueError, match="window"):
        SlidingWindowSpec(block_size=16, dtype="float32", num_kv_heads=2, head_dim=16, window=0)
