"""Per-layer KV specs drive sizing and allocation: a Mistral checkpoint with a sliding window on
every layer, and a Qwen3 one with a full and a windowed layer, still match transformers."""

import json
import shutil

import torch

from engine import LLM
from engine.checkpoint import load_model_config
from engine.kv.specs import FullAttentionSpec, SlidingWindowSpec, total_block_bytes
from engine.models.registry import kv_cache_specs
from engine.runner.kv_sizing import block_bytes
from tests.support.oracle import assert_matches_transformers

BLOCK = 16
SHAPE = dict(block_size=BLOCK, dtype="float32", num_kv_heads=2, head_dim=16)  # the tiny models' heads


def _allocated_like_specs(llm: LLM, specs) -> None:
    runner = llm.engine.runner
    assert runner.kv_cache_specs() == specs
    for attn, spec in zip(runner.model.attention_layers(), specs, strict=True):
        assert attn.sliding_window == getattr(spec, "window", None)
        # A windowed layer beside full-attention ones has the window group's pool (engine/kv/layout.py).
        own_pool = runner.num_window_blocks and attn.sliding_window is not None
        pages = runner.num_window_blocks if own_pool else runner.num_blocks
        shape = spec.cache_shape(pages)
        assert (2, *attn.k_cache.shape) == shape and attn.v_cache.shape == attn.k_cache.shape
        # K and V are the two halves of the layer's one tensor
        assert attn.v_cache.data_ptr() - attn.k_cache.data_ptr() == attn.k_cache.nbytes
        assert attn.k_cache.untyped_storage().nbytes() == spec.block_bytes * pages


def test_mistral_window_is_a_sliding_window_spec_on_every_layer(tiny_models):
    cfg = load_model_config(tiny_models["mistral"])
    specs = kv_cache_specs(cfg, BLOCK, "float32")
    assert specs == [SlidingWindowSpec(**SHAPE, window=24)] * 2
    # Sizing sums the specs: K+V x 2 KV heads x 16 dims x fp32, 16 tokens, two layers.
    assert block_bytes(cfg, BLOCK, torch.float32) == total_block_bytes(specs) == 2 * (16 * 2 * 2 * 16 * 4)
    # Each of two tensor-parallel ranks holds one KV head.
    assert block_bytes(cfg, BLOCK, torch.float32, tp=2) == total_block_bytes(specs) // 2


def test_mistral_with_a_sliding_window_matches_transformers(tiny_models):
    llm = assert_matches_transformers(
        tiny_models["mistral"], (9, 40, 61), seed=5, block_size=BLOCK, num_gpu_blocks=20, max_model_len=256
    )
    assert llm.engine.runner.num_blocks == 20
    _allocated_like_specs(llm, [SlidingWindowSpec(**SHAPE, window=24)] * 2)


def test_a_full_and_a_windowed_layer_each_get_their_spec(tiny_qwen3, tmp_path):
    path = shutil.copytree(tiny_qwen3, tmp_path / "mixed")
    raw = json.loads((path / "config.json").read_text())
    raw.update(
        use_sliding_window=True,
        sliding_window=8,
        max_window_layers=1,
        layer_types=["full_attention", "sliding_attention"],
    )
    (path / "config.json").write_text(json.dumps(raw))
    specs = [FullAttentionSpec(**SHAPE), SlidingWindowSpec(**SHAPE, window=8)]
    assert kv_cache_specs(load_model_config(path), BLOCK, "float32") == specs
    llm = assert_matches_transformers(path, (5, 30), seed=5, block_size=BLOCK)
    _allocated_like_specs(llm, specs)
    runner = llm.engine.runner
    # The window group's pool holds what the running requests' windows can (64 sequences of a
    # window of 8 in at most 3 blocks, and a step's 2,048 new tokens), far less than the main pool.
    assert runner.num_window_blocks == 64 * 3 + 2048 // BLOCK < runner.num_blocks
