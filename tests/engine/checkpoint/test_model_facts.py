"""Parameter counts and KV bytes of real checkpoints, from their published config.json values, against
the figures their makers publish and against transformers' own count of the same architecture."""

from __future__ import annotations

from dataclasses import replace
from math import prod

import pytest

from engine.checkpoint.model_config import load_model_config, parse_model_config
from engine.checkpoint.model_facts import (
    device_memory_bytes,
    kv_bytes_per_token,
    model_facts,
    parameter_counts,
)
from engine.checkpoint.weights import tensor_shapes

B = 1e9
TOTAL_TOLERANCE = 0.005

LLAMA_3_1_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}  # fmt: skip
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
    "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 2048,
    "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
    "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 102400,
    "n_routed_experts": 64, "num_experts_per_tok": 6, "n_shared_experts": 2, "first_k_dense_replace": 1,
    "q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}  # fmt: skip
DEEPSEEK_V3 = {
    **DEEPSEEK_V2_LITE, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
    "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280, "n_routed_experts": 256,
    "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3, "n_group": 8,
    "topk_group": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
    "routed_scaling_factor": 2.5, "q_lora_rank": 1536, "num_nextn_predict_layers": 1,
}  # fmt: skip
GEMMA_2_2B = {
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 2304,
    "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "vocab_size": 256000, "torch_dtype": "float32",
}  # fmt: skip
GEMMA_3_1B = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 1152,
    "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1,
    "head_dim": 256, "vocab_size": 262144, "sliding_window": 512, "torch_dtype": "bfloat16",
}  # fmt: skip
PUBLISHED_CONFIGS = [
    LLAMA_3_1_8B, MIXTRAL_8X7B, QWEN3_30B_A3B, DEEPSEEK_V2_LITE, DEEPSEEK_V3, GEMMA_2_2B, GEMMA_3_1B,
]  # fmt: skip


def assert_published(count: int, billions: float, tolerance: float = TOTAL_TOLERANCE) -> None:
    assert abs(count / (billions * B) - 1) <= tolerance, f"{count / B:.3f} B is not {billions} B"


def test_llama_3_1_8b_has_its_8_03_billion_parameters_all_active():
    counts = parameter_counts(parse_model_config(LLAMA_3_1_8B))
    assert_published(counts.total, 8.03)
    assert counts.active + counts.input_embedding == counts.total  # dense: every weight is read


def test_mixtral_8x7b_counts_two_of_eight_experts_as_active():
    counts = parameter_counts(parse_model_config(MIXTRAL_8X7B))
    assert_published(counts.total, 46.7)
    # Mistral's 12.9 B active counts the input embedding table as well.
    assert_published(counts.active + counts.input_embedding, 12.9, tolerance=0.01)


def test_qwen3_30b_a3b_active_is_3_04_billion_or_the_cards_3_3_with_embeddings():
    counts = parameter_counts(parse_model_config(QWEN3_30B_A3B))
    assert_published(counts.total, 30.5)
    assert_published(counts.active, 3.04)  # the figure: LM head in, input embedding out
    # The card's "3.3 B activated" is this count truncated (3.35 B), its "29.9 B non-embedding" the
    # total without either embedding matrix.
    assert 3.3 * B <= counts.active + counts.input_embedding < 3.4 * B
    assert_published(counts.total - 2 * counts.input_embedding, 29.9)


def test_deepseek_v2_lite_has_15_7_billion_of_which_2_45_active():
    counts = parameter_counts(parse_model_config(DEEPSEEK_V2_LITE))
    assert_published(counts.total, 15.7)
    assert_published(counts.active, 2.45)  # DeepSeek's "2.4 B activated", the 2.45 B


def test_deepseek_v3_has_671_billion_of_which_37_active_without_its_mtp_layer():
    counts = parameter_counts(parse_model_config(DEEPSEEK_V3))
    assert_published(counts.total, 671)
    assert round(counts.active / B) == 37  # 36.6 B


@pytest.mark.parametrize("raw", PUBLISHED_CONFIGS, ids=lambda raw: raw["model_type"])
def test_total_equals_transformers_count_of_the_same_config(raw):
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_config = AutoConfig.for_model(raw["model_type"], **{k: v for k, v in raw.items() if k != "model_type"})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    # DeepSeek-V3's e_score_correction_bias is a buffer there, a tensor of the checkpoint all the same.
    bias = sum(b.numel() for name, b in model.named_buffers() if name.endswith("e_score_correction_bias"))
    assert (
        parameter_counts(parse_model_config(raw)).total == sum(p.numel() for p in model.parameters()) + bias
    )


def test_mla_with_q_lora_counts_the_query_down_and_up_projections_and_their_norm():
    plain = parse_model_config(DEEPSEEK_V2_LITE)
    mla = plain.mla
    with_lora = replace(plain, mla=replace(mla, q_lora_rank=1536))
    h, q_width = plain.hidden_size, plain.num_heads * mla.qk_head_dim
    per_layer = (h * 1536 + 1536 + 1536 * q_width) - h * q_width
    delta = parameter_counts(with_lora).total - parameter_counts(plain).total
    assert delta == plain.num_layers * per_layer


def test_mla_caches_one_latent_per_token_and_layer_for_all_heads_on_every_rank():
    cfg = parse_model_config(DEEPSEEK_V2_LITE)
    mla = cfg.mla
    latent = cfg.num_layers * (mla.kv_lora_rank + mla.qk_rope_head_dim) * 2  # bf16
    assert kv_bytes_per_token(cfg) == kv_bytes_per_token(cfg, tp=8) == latent
    per_head_layout = cfg.num_layers * cfg.num_heads * (mla.qk_head_dim + mla.v_head_dim) * 2
    assert per_head_layout >= 8 * kv_bytes_per_token(cfg)  # issue 16's capacity goal for this shape


def test_llama_kv_bytes_per_token_split_over_tensor_parallel_ranks():
    cfg = parse_model_config(LLAMA_3_1_8B)
    per_layer = 2 * cfg.num_kv_heads * cfg.head_dim * 2  # K and V, bf16
    assert kv_bytes_per_token(cfg) == cfg.num_layers * per_layer
    assert kv_bytes_per_token(cfg, tp=2) * 2 == kv_bytes_per_token(cfg)
    assert kv_bytes_per_token(cfg, tp=16) == kv_bytes_per_token(cfg, tp=8)  # a KV head each, replicated
    assert kv_bytes_per_token(cfg, dtype="float8_e4m3fn") * 2 == kv_bytes_per_token(cfg)


def test_facts_give_each_rank_its_share_of_weights_and_its_kv():
    cfg = parse_model_config(LLAMA_3_1_8B)
    facts = model_facts(cfg)
    assert facts.weight_bytes == 2 * facts.total_parameters
    assert facts.kv_bytes_per_token == facts.kv_bytes_per_token_by_tp[1] == kv_bytes_per_token(cfg)
    rank = device_memory_bytes(facts.weight_bytes, 4, facts.kv_bytes_per_token_by_tp[4], 8192)
    assert rank == facts.weight_bytes // 4 + kv_bytes_per_token(cfg, tp=4) * 8192


def test_config_count_equals_the_decoder_tensors_each_tiny_checkpoint_holds(tiny_models):
    for arch, model_dir in tiny_models.items():
        cfg = load_model_config(model_dir)
        counts = parameter_counts(cfg)
        stored = {name: prod(shape) for name, (shape, _) in tensor_shapes(model_dir).items()}
        mtp = {name for name in stored if _layer_index(name) >= cfg.num_layers}
        assert counts.total == sum(stored.values()) - sum(stored[name] for name in mtp), arch
        assert counts.active + counts.input_embedding <= counts.total, arch
        assert (counts.active + counts.input_embedding < counts.total) == (cfg.moe is not None), arch


def _layer_index(name: str) -> int:
    """``model.layers.<i>.…`` -> i; -1 for tensors outside the layers."""
    parts = name.split(".")
    return int(parts[2]) if parts[:2] == ["model", "layers"] else -1
