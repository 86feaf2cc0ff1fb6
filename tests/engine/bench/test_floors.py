"""The physical floors of engine/bench/floors.py, counted by hand on small models, and the published
bs=1 decode floors of the mixture-of-experts shapes (issue 16: 1.20 ms and 1.49 ms at 4.08 TB/s)."""

import pytest

from engine.bench.floors import (
    Ceilings,
    active_weight_bytes,
    decode_floor_ms,
    decode_step_floor,
    experts_read,
    step_weight_bytes,
    workload_floor,
)
from engine.bench.random_arch import hf_config
from engine.checkpoint.model_config import parse_model_config
from engine.checkpoint.model_facts import parameter_counts

ONE_LAYER = parse_model_config(
    {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4,
        "intermediate_size": 8,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "num_key_value_heads": 1,
        "head_dim": 4,
        "vocab_size": 10,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
)
H200_COPY = Ceilings(copy_bytes_per_s=4.08e12, matmul_flops_per_s=7e14)


def test_floor_counts_projection_lm_head_and_prompt_attention_flops_and_decode_kv_reads():
    # One request, prompt 2, output 2: 3 tokens go through the layer (the last output is never fed).
    # MACs per token besides the LM head: qkv 4*(4+4+4) + o 4*4 + gate/up/down 3*4*8 = 160, and the
    # norm weights model_facts counts as active (2 per layer + the final one, 4 each) = 12 -> 2*172*3.
    # LM head on 2 generated tokens: 2*10*4*2 = 160. Prompt attention: 2*2*q(4)*p(2)*(p+1)/2 = 48.
    # KV bytes per context token: 1 layer * (K+V) * 4 * 2 bytes = 16; output token 2 reads 3 -> 48.
    floor = workload_floor(ONE_LAYER, [2], [2], Ceilings(copy_bytes_per_s=16.0, matmul_flops_per_s=1240.0))
    assert floor.compute_s == pytest.approx(1.0)
    assert floor.kv_read_s == pytest.approx(3.0)
    assert floor.seconds == pytest.approx(4.0)


def test_floor_grows_with_every_request():
    ceilings = Ceilings(copy_bytes_per_s=1e9, matmul_flops_per_s=1e12)
    one = workload_floor(ONE_LAYER, [64], [32], ceilings)
    two = workload_floor(ONE_LAYER, [64, 64], [32, 32], ceilings)
    assert two.compute_s == pytest.approx(2 * one.compute_s)
    assert two.kv_read_s == pytest.approx(2 * one.kv_read_s)


def test_latent_attention_prompt_flops_use_the_query_key_and_value_widths():
    # tiny-deepseek-v2: 4 heads, QK^T over nope 16 + rope 8, PV over v 16: 4 * 40 MACs per pair per layer.
    cfg = parse_model_config(hf_config("tiny-deepseek-v2"))
    ceilings = Ceilings(copy_bytes_per_s=1.0, matmul_flops_per_s=1.0)
    one = workload_floor(cfg, [1], [1], ceilings).compute_s
    three = workload_floor(cfg, [3], [1], ceilings).compute_s
    linear = 2 * (parameter_counts(cfg).active - cfg.vocab_size * cfg.hidden_size)
    pairs = 3 * 4 / 2 - 1  # causal pairs of a 3-token prompt minus those of a 1-token one
    assert three - one == pytest.approx(2 * linear + 2 * cfg.num_layers * 4 * 40 * pairs)


@pytest.mark.parametrize(("name", "ms"), [("deepseek-v2-lite", 1.20), ("qwen3-30b-a3b", 1.49)])
def test_bs1_decode_floor_is_the_active_weights_in_bf16_at_copy_bandwidth(name, ms):
    cfg = parse_model_config(hf_config(name))
    assert active_weight_bytes(cfg) == 2 * parameter_counts(cfg).active
    assert decode_floor_ms(active_weight_bytes(cfg), H200_COPY) == pytest.approx(ms, abs=0.005)


def test_a_step_reads_the_experts_its_batch_spreads_over():
    # tiny-qwen3-moe: 8 experts, top 2, both layers MoE, one expert 3 * 128 * 64 weights.
    cfg = parse_model_config(hf_config("tiny-qwen3-moe"))
    counts = parameter_counts(cfg)
    expert = 3 * 128 * 64
    assert [experts_read(cfg, b) for b in (1, 2, 3, 4, 128)] == [2, 4, 6, 8, 8]
    assert step_weight_bytes(cfg, 1, "float32") == 4 * counts.active
    assert step_weight_bytes(cfg, 2, "float32") == 4 * (counts.active + 2 * 2 * expert)
    assert step_weight_bytes(cfg, 128, "float32") == 4 * (counts.total - counts.input_embedding)


@pytest.mark.parametrize("name", ["deepseek-v2-lite", "qwen3-30b-a3b"])
def test_batch_128_reads_every_expert_of_the_published_shapes(name):
    cfg = parse_model_config(hf_config(name))
    counts = parameter_counts(cfg)
    assert experts_read(cfg, 128) == cfg.moe.num_experts
    assert step_weight_bytes(cfg, 128) == 2 * (counts.total - counts.input_embedding)


def test_a_dense_step_reads_its_weights_once_whatever_the_batch():
    assert experts_read(ONE_LAYER, 128) == 0
    assert (
        step_weight_bytes(ONE_LAYER, 128) == step_weight_bytes(ONE_LAYER, 1) == active_weight_bytes(ONE_LAYER)
    )


def test_decode_step_floor_adds_the_batch_contexts_latent_reads():
    # tiny-deepseek-v2 caches latent 32 + rope 8 values per token per layer: 2 layers * 40 * 2 bytes.
    cfg = parse_model_config(hf_config("tiny-deepseek-v2"))
    floor = decode_step_floor(cfg, [100, 300], Ceilings(copy_bytes_per_s=1e6, matmul_flops_per_s=1.0))
    assert floor.kv_bytes == 400 * 2 * 40 * 2
    assert floor.weight_bytes == step_weight_bytes(cfg, 2)
    assert floor.seconds == pytest.approx((floor.weight_bytes + floor.kv_bytes) / 1e6)


def test_without_a_batch_cap_weight_reads_are_left_out():
    floor = workload_floor(ONE_LAYER, [8], [4], H200_COPY)
    assert floor.weight_read_s == 0.0
    assert floor.seconds == pytest.approx(floor.compute_s + floor.kv_read_s)


def test_a_dense_model_reads_its_weights_once_per_step_of_the_longest_output_at_least():
    # 2 requests of 3 outputs under a cap of 4: per token A / 2 (6 tokens: 3 A), per step A (3 steps: 3 A).
    ceilings = Ceilings(copy_bytes_per_s=1.0, matmul_flops_per_s=1e30)
    floor = workload_floor(ONE_LAYER, [2, 2], [3, 3], ceilings, max_num_seqs=4)
    assert floor.weight_read_s == pytest.approx(3 * active_weight_bytes(ONE_LAYER))
    assert floor.seconds == pytest.approx(floor.weight_read_s + floor.kv_read_s)  # compute ~ 0 here


def test_mixture_of_experts_weight_reads_at_a_full_batch_read_every_expert():
    # tiny-qwen3-moe, 8 requests of 4 outputs, cap 4: a full step reads all 8 experts (4 x top-2),
    # 32 tokens / 4 per step = 8 full steps at least.
    cfg = parse_model_config(hf_config("tiny-qwen3-moe"))
    ceilings = Ceilings(copy_bytes_per_s=1.0, matmul_flops_per_s=1.0)
    floor = workload_floor(cfg, [2] * 8, [4] * 8, ceilings, "float32", max_num_seqs=4)
    counts = parameter_counts(cfg)
    assert floor.weight_read_s == pytest.approx(8 * 4 * (counts.total - counts.input_embedding))
    assert floor.seconds == pytest.approx(max(floor.compute_s, floor.weight_read_s) + floor.kv_read_s)
