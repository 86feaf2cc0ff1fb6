"""Gemma-2 (engine/models/gemma2.py): the Llama decoder with Gemma's norms, embedding scale, GeGLU,
alternating local and global layers and soft-capped attention scores and logits, parsed, built and run
against transformers on a tiny checkpoint (windows of 16 tokens, caps low enough to bite)."""

import pytest
import torch
from safetensors.torch import load_file

from engine.checkpoint import CheckpointError, load_model_config
from engine.checkpoint.model_config import parse_model_config
from engine.kv.specs import FullAttentionSpec, SlidingWindowSpec
from engine.models import registry
from engine.models.gemma2 import GEMMA2
from tests.support.deepseek_edits import with_config
from tests.support.oracle import assert_matches_transformers

SHAPE = dict(block_size=16, dtype="float32", num_kv_heads=2, head_dim=16)
LOCAL, GLOBAL = SlidingWindowSpec(**SHAPE, window=16), FullAttentionSpec(**SHAPE)

# google/gemma-2-2b's config.json (transformers 4.42): no layer_types, no tie_word_embeddings.
GEMMA_2_2B = {
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attention_bias": False,
    "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304,
    "intermediate_size": 9216, "max_position_embeddings": 8192, "num_attention_heads": 8,
    "num_hidden_layers": 26, "num_key_value_heads": 4, "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "torch_dtype": "float32",
    "vocab_size": 256000,
}  # fmt: skip


def test_gemma2_is_served_by_its_module(tiny_gemma2):
    cfg = load_model_config(tiny_gemma2)
    assert registry.get_architecture("Gemma2ForCausalLM") is GEMMA2
    assert cfg.architecture == "Gemma2ForCausalLM"
    assert cfg.sliding_windows == [16, None, 16, None]
    assert (cfg.attn_logit_softcap, cfg.final_logit_softcap) == (2.0, 5.0)
    assert cfg.attention_scale == pytest.approx(24**-0.5)  # query_pre_attn_scalar, not head_dim
    assert cfg.embedding_multiplier == 8.0 and cfg.hidden_act == "gelu_pytorch_tanh"
    assert cfg.norm_weight_offset == 1.0 and cfg.sandwich_norms and cfg.tie_word_embeddings
    assert not cfg.qk_norm and cfg.local_rope_theta is None
    assert registry.kv_cache_specs(cfg, block_size=16, dtype="float32") == [LOCAL, GLOBAL, LOCAL, GLOBAL]


def test_a_hub_config_takes_transformers_defaults_for_what_it_leaves_out():
    cfg = parse_model_config(GEMMA_2_2B)
    assert cfg.sliding_windows == [4096, None] * 13  # local first, global every second layer
    assert cfg.tie_word_embeddings and cfg.head_dim == 256
    assert (cfg.attn_logit_softcap, cfg.final_logit_softcap) == (50.0, 30.0)
    bare = {k: v for k, v in GEMMA_2_2B.items() if not k.endswith("softcapping")}
    assert (parse_model_config(bare).attn_logit_softcap, parse_model_config(bare).final_logit_softcap) == (
        50.0,
        30.0,
    )
    off = parse_model_config(dict(GEMMA_2_2B, attn_logit_softcapping=None, final_logit_softcapping=None))
    assert off.attn_logit_softcap is None and off.final_logit_softcap is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"attn_logit_softcapping": 0}, "attn_logit_softcapping must be a positive number"),
        ({"hidden_activation": "relu"}, "activation 'relu' is not supported"),
        ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
        ({"layer_types": ["full_attention"]}, "layer_types has 1 entries"),
    ],
)
def test_a_config_the_decoder_cannot_run_is_refused(change, reason):
    with pytest.raises(CheckpointError, match=reason):
        parse_model_config(dict(GEMMA_2_2B, **change))


def test_gemma2_matches_transformers(tiny_gemma2):
    llm = assert_matches_transformers(tiny_gemma2, prompt_lengths=(6, 29, 45))  # 29, 45: past the window
    model = llm.engine.runner.model
    assert [layer.self_attn.attn.softcap for layer in model.layers] == [2.0] * 4
    assert model.lm_head.softcap == 5.0
    assert model.embed_tokens.multiplier == 8.0
    # the four norms, each holding 1 + the checkpoint's weight
    stored = load_file(str(tiny_gemma2 / "model.safetensors"))
    for name in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm"):
        loaded = getattr(model.layers[1], name).weight
        torch.testing.assert_close(loaded, 1 + stored[f"model.layers.1.{name}.weight"])
    assert model.layers[3].post_feedforward_layernorm is not None


def test_uncapped_gemma2_matches_transformers(tiny_gemma2, tmp_path):
    """Caps off (null) is the plain path again: the fused kernels, no tanh."""
    path = with_config(
        tiny_gemma2, tmp_path / "uncapped", attn_logit_softcapping=None, final_logit_softcapping=None
    )
    llm = assert_matches_transformers(path, prompt_lengths=(29,))
    assert llm.engine.runner.model.layers[0].self_attn.attn.softcap is None
