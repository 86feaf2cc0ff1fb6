"""The decode-product shapes ``scripts/gpu/bench_decode_kernels.py --arch`` times for the MoE models."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts" / "gpu"))

import bench_decode_kernels  # noqa: E402


def test_mla_model_products_stack_the_query_with_the_latent():
    shapes, layers = bench_decode_kernels.arch_shapes("deepseek-v2-lite")
    assert layers == 27
    assert shapes == [
        ("deepseek-v2-lite:qkv", 16 * 192 + 512 + 64, 2048, False),
        ("deepseek-v2-lite:o_proj", 2048, 16 * 128, False),
        ("deepseek-v2-lite:mlp_gate_up", 2 * 10944, 2048, False),
        ("deepseek-v2-lite:mlp_down+silu", 2048, 10944, True),
        ("deepseek-v2-lite:shared_gate_up", 2 * 2 * 1408, 2048, False),
        ("deepseek-v2-lite:shared_down+silu", 2048, 2 * 1408, True),
        ("deepseek-v2-lite:lm_head", 102400, 2048, False),
    ]


def test_gqa_moe_model_has_no_dense_mlp():
    shapes, layers = bench_decode_kernels.arch_shapes("qwen3-30b-a3b")
    assert layers == 48
    assert shapes == [
        ("qwen3-30b-a3b:qkv", (32 + 2 * 4) * 128, 2048, False),
        ("qwen3-30b-a3b:o_proj", 2048, 32 * 128, False),
        ("qwen3-30b-a3b:lm_head", 151936, 2048, False),
    ]


def test_the_products_a_norm_precedes_are_tuned_fused_for_an_arch_too():
    shapes, _ = bench_decode_kernels.arch_shapes("deepseek-v2-lite")
    normed = [name.rsplit(":", 1)[-1] for name, *_ in shapes if bench_decode_kernels._normed(name)]
    assert normed == ["qkv", "mlp_gate_up", "lm_head"]  # not o_proj, the shared experts or the down
    assert bench_decode_kernels._normed("qkv") and not bench_decode_kernels._normed("o_proj")
