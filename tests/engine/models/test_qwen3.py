"""Qwen3 (engine/models/qwen3.py): the Llama decoder with an RMSNorm on every query and key head,
parsed, built and run against transformers on a tiny checkpoint."""

import json
import shutil

from engine.checkpoint import load_model_config
from engine.kv.specs import FullAttentionSpec
from engine.models import registry
from engine.models.qwen3 import QWEN3
from tests.support.oracle import assert_matches_transformers


def test_qwen3_is_served_by_its_module(tiny_qwen3):
    cfg = load_model_config(tiny_qwen3)
    assert registry.get_architecture("Qwen3ForCausalLM") is QWEN3
    assert cfg.architecture == "Qwen3ForCausalLM"
    assert cfg.qk_norm and not cfg.qkv_bias and cfg.tie_word_embeddings
    assert cfg.sliding_windows == [None, None]
    specs = registry.kv_cache_specs(cfg, block_size=16, dtype="float32")
    assert specs == [FullAttentionSpec(block_size=16, dtype="float32", num_kv_heads=2, head_dim=16)] * 2


def test_attention_bias_is_read_from_the_config(tiny_qwen3, tmp_path):
    path = shutil.copytree(tiny_qwen3, tmp_path / "ckpt")
    raw = json.loads((path / "config.json").read_text())
    raw["attention_bias"] = True
    (path / "config.json").write_text(json.dumps(raw))
    assert load_model_config(path).qkv_bias


def test_qwen3_matches_transformers(tiny_qwen3):
    llm = assert_matches_transformers(tiny_qwen3)
    for layer in llm.engine.runner.model.layers:  # the q/k norm really is in the built model
        assert layer.self_attn.q_norm is not None and layer.self_attn.k_norm is not None
