"""Gemma-3 text (engine/models/gemma3.py): Gemma-2's decoder with q/k norms, five local layers to one
global by default and a RoPE base of its own on the local layers, parsed, built and run against
transformers on a tiny checkpoint (two local layers to one global, windows of 16 tokens, linear RoPE
scaling on the global layers)."""

import pytest

from engine.checkpoint import CheckpointError, load_model_config
from engine.checkpoint.model_config import parse_model_config
from engine.kv.specs import FullAttentionSpec, SlidingWindowSpec
from engine.models import registry
from engine.models.gemma3 import GEMMA3
from tests.support.deepseek_edits import with_config
from tests.support.oracle import assert_matches_transformers

SHAPE = dict(block_size=16, dtype="float32", num_kv_heads=2, head_dim=16)
LOCAL, GLOBAL = SlidingWindowSpec(**SHAPE, window=16), FullAttentionSpec(**SHAPE)

# google/gemma-3-1b-it's config.json (transformers 4.50): the RoPE bases as flat keys, the layers by
# sliding_window_pattern, no tie_word_embeddings.
GEMMA_3_1B = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": False,
    "attn_logit_softcapping": None, "final_logit_softcapping": None, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
    "max_position_embeddings": 32768, "num_attention_heads": 4, "num_hidden_layers": 26,
    "num_key_value_heads": 1, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": 512,
    "sliding_window_pattern": 6, "torch_dtype": "bfloat16", "vocab_size": 262144,
}  # fmt: skip


def test_gemma3_is_served_by_its_module(tiny_gemma3):
    cfg = load_model_config(tiny_gemma3)
    assert registry.get_architecture("Gemma3ForCausalLM") is GEMMA3
    assert cfg.architecture == "Gemma3ForCausalLM"
    assert cfg.sliding_windows == [16, 16, None, 16, 16, None]
    assert cfg.qk_norm and cfg.norm_weight_offset == 1.0 and cfg.sandwich_norms and cfg.tie_word_embeddings
    assert cfg.rope_theta == 1_000_000.0 and cfg.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    assert cfg.local_rope_theta == 10_000.0
    assert cfg.attn_logit_softcap is None and cfg.final_logit_softcap is None
    assert cfg.attention_scale == pytest.approx(24**-0.5)
    specs = registry.kv_cache_specs(cfg, block_size=16, dtype="float32")
    assert specs == [LOCAL, LOCAL, GLOBAL, LOCAL, LOCAL, GLOBAL]


def test_a_hub_config_with_flat_rope_keys_and_a_pattern():
    cfg = parse_model_config(GEMMA_3_1B)
    assert cfg.sliding_windows == ([512] * 5 + [None]) * 4 + [512, 512]
    assert cfg.rope_theta == 1_000_000.0 and cfg.rope_scaling is None and cfg.local_rope_theta == 10_000.0
    assert cfg.tie_word_embeddings and cfg.qk_norm and cfg.attn_logit_softcap is None
    scaled = parse_model_config(dict(GEMMA_3_1B, rope_scaling={"rope_type": "linear", "factor": 8.0}))
    assert scaled.rope_scaling == {"rope_type": "linear", "factor": 8.0}
    assert scaled.local_rope_theta == 10_000.0  # the local layers stay unscaled


def test_scaled_rope_on_the_local_layers_is_refused():
    rope = {
        "full_attention": {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
    }
    with pytest.raises(CheckpointError, match="sliding-window layers"):
        parse_model_config(dict(GEMMA_3_1B, rope_parameters=rope))


def test_gemma3_matches_transformers(tiny_gemma3):
    llm = assert_matches_transformers(tiny_gemma3, prompt_lengths=(6, 29, 45))  # 29, 45: past the window
    layers = llm.engine.runner.model.layers
    assert all(layer.self_attn.q_norm is not None and layer.self_attn.k_norm is not None for layer in layers)
    local, global_ = layers[0].self_attn.attn.rotary, layers[2].self_attn.attn.rotary
    assert layers[1].self_attn.attn.rotary is local and layers[5].self_attn.attn.rotary is global_
    assert local is not global_


def test_gemma3_with_soft_caps_set_matches_transformers(tiny_gemma3, tmp_path):
    """transformers' Gemma-3 caps the logits, but never passes attn_logit_softcapping to its attention:
    served as it runs it."""
    path = with_config(
        tiny_gemma3, tmp_path / "capped", final_logit_softcapping=2.0, attn_logit_softcapping=1.0
    )
    cfg = load_model_config(path)
    assert cfg.final_logit_softcap == 2.0 and cfg.attn_logit_softcap is None
    llm = assert_matches_transformers(path, prompt_lengths=(29,))
    assert llm.engine.runner.model.lm_head.softcap == 2.0
