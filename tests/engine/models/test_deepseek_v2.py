"""DeepSeek-V2 (engine/models/deepseek_v2.py): multi-head latent attention without q-LoRA (and with
it), YaRN, a dense first layer then group-limited softmax routing with a shared expert, parsed,
built and run against transformers on a tiny checkpoint."""

import pytest

from engine.checkpoint import load_model_config
from engine.checkpoint.mla_config import MLAConfig
from engine.kv.specs import MLASpec
from engine.layers.latent_attention import LatentAttention
from engine.layers.mla import MLAAttention
from engine.models import registry
from engine.models.deepseek_v2 import DEEPSEEK_V2
from engine.models.registry import kv_cache_specs
from engine.testing import tiny_deepseek as tiny
from tests.support.deepseek_edits import with_config, with_q_lora
from tests.support.oracle import assert_matches_transformers


def test_deepseek_v2_is_served_by_its_module(tiny_models):
    cfg = load_model_config(tiny_models["deepseek_v2"])
    assert registry.get_architecture("DeepseekV2ForCausalLM") is DEEPSEEK_V2
    assert cfg.mla == MLAConfig(
        q_lora_rank=None,
        kv_lora_rank=tiny.KV_LORA_RANK,
        qk_nope_head_dim=tiny.QK_NOPE_HEAD_DIM,
        qk_rope_head_dim=tiny.QK_ROPE_HEAD_DIM,
        v_head_dim=tiny.V_HEAD_DIM,
        rope_interleave=True,
    )
    moe = cfg.moe
    assert moe.moe_layers == (False, True)  # first_k_dense_replace = 1
    assert (moe.num_experts, moe.top_k, moe.intermediate_size) == (tiny.EXPERTS, tiny.TOP_K, 32)
    assert (moe.scoring, moe.group_score, moe.num_groups, moe.topk_groups) == ("softmax", "max", 4, 2)
    assert not moe.renormalize and not moe.score_correction_bias and moe.routed_scaling_factor == 1.5
    assert moe.shared_intermediate_size == tiny.SHARED_EXPERTS * tiny.MOE_INTERMEDIATE
    assert cfg.rope_scaling["rope_type"] == "yarn" and cfg.rope_scaling["mscale_all_dim"] == 0.707
    assert cfg.num_mtp_layers == 0
    latent = MLASpec(block_size=16, dtype="float32", kv_lora_rank=32, rope_head_dim=8)
    assert kv_cache_specs(cfg, 16, "float32") == kv_cache_specs(cfg, 16, "float32", tp=4) == [latent] * 2


def test_greedy_topk_ignores_groups(tiny_models, tmp_path):
    path = with_config(tiny_models["deepseek_v2"], tmp_path / "greedy", topk_method="greedy")
    moe = load_model_config(path).moe
    assert (moe.num_groups, moe.topk_groups) == (1, 1)


def test_an_unknown_topk_method_is_refused(tiny_models, tmp_path):
    from engine.checkpoint.errors import CheckpointError

    path = with_config(tiny_models["deepseek_v2"], tmp_path / "bad", topk_method="random")
    with pytest.raises(CheckpointError, match="topk_method"):
        load_model_config(path)


def test_deepseek_v2_matches_transformers(tiny_models):
    llm = assert_matches_transformers(tiny_models["deepseek_v2"], prompt_lengths=(6, 29, 45))
    model = llm.engine.runner.model
    assert all(isinstance(layer.self_attn, MLAAttention) for layer in model.layers)
    assert all(isinstance(attn, LatentAttention) for attn in model.attention_layers())
    assert model.layers[0].self_attn.q_b_proj is None  # q-LoRA off


def test_deepseek_v2_with_q_lora_matches_transformers(tiny_models, tmp_path):
    path = with_q_lora(tiny_models["deepseek_v2"], tmp_path / "q-lora", q_lora_rank=20)
    llm = assert_matches_transformers(path)
    assert llm.engine.runner.model.layers[0].self_attn.q_b_proj is not None


def test_deepseek_v2_with_shared_experts_fused_matches_transformers(tiny_models):
    """shared_experts fused (auto fuses on CUDA only): the shared experts run as routed experts at
    weight 1 (engine/layers/moe.py), still token for token and logit for logit."""
    llm = assert_matches_transformers(tiny_models["deepseek_v2"], shared_experts="fused")
    moe = llm.engine.runner.model.layers[1].mlp
    assert moe.shared_experts is None and moe.gate.shared_slots == tiny.SHARED_EXPERTS
    assert moe.experts.w13.shape[0] == tiny.EXPERTS + tiny.SHARED_EXPERTS
