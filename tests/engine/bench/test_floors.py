"""The physical floor of a workload, counted by hand on a one-layer model."""

import pytest

from engine.bench.floors import Ceilings, workload_floor

CONFIG = {
    "hidden_size": 4,
    "intermediate_size": 8,
    "num_hidden_layers": 1,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "head_dim": 4,
    "vocab_size": 10,
}


def test_floor_counts_projection_lm_head_and_prompt_attention_flops_and_decode_kv_reads():
    # One request, prompt 2, output 2: 3 tokens go through the layer (the last output is never fed).
    # Projection MACs per token: qkv 4*(4+4+4) + o 4*4 + gate/up/down 3*4*8 = 160 -> 2*160*3 = 960.
    # LM head on 2 generated tokens: 2*10*4*2 = 160. Prompt attention: 2*2*q(4)*p(2)*(p+1)/2 = 48.
    # KV bytes per context token: 1 layer * (K+V) * 4 * 2 bytes = 16; output token 2 reads 3 -> 48.
    floor = workload_floor(CONFIG, [2], [2], Ceilings(copy_bytes_per_s=16.0, matmul_flops_per_s=1168.0))
    assert floor.compute_s == pytest.approx(1.0)
    assert floor.kv_read_s == pytest.approx(3.0)
    assert floor.seconds == pytest.approx(4.0)


def test_floor_grows_with_every_request():
    ceilings = Ceilings(copy_bytes_per_s=1e9, matmul_flops_per_s=1e12)
    one = workload_floor(CONFIG, [64], [32], ceilings)
    two = workload_floor(CONFIG, [64, 64], [32, 32], ceilings)
    assert two.compute_s == pytest.approx(2 * one.compute_s)
    assert two.kv_read_s == pytest.approx(2 * one.kv_read_s)
