"""Per-layer KV specs drive sizing and allocation: a Mistral checkpoint with a sliding window on
every layer, and a Qwen3 one with a full and a windowed layer, still match transformers."""

import json
import shutil

import torch
from transformers import AutoModelForCausalLM

from engine import LLM, SamplingParams
from engine.checkpoint import load_model_config
from engine.kv.specs import FullAttentionSpec, SlidingWindowSpec, total_block_bytes
from engine.models.registry import kv_cache_specs
from engine.runner.kv_sizing import block_bytes

BLOCK = 16
NEW_TOKENS = 8
SHAPE = dict(block_size=BLOCK, dtype="float32", num_kv_heads=2, head_dim=16)  # the tiny models' heads


def _greedy_matches_transformers(path, prompt_lengths, **engine_kwargs) -> LLM:
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None  # full-length runs, as ours with ignore_eos
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, hf.config.vocab_size, (n,), generator=gen).tolist() for n in prompt_lengths]
    llm = LLM(path, device="cpu", dtype="float32", block_size=BLOCK, **engine_kwargs)
    llm.engine.runner.keep_logits = True
    outs = llm.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True))
    with torch.no_grad():
        for prompt, out in zip(prompts, outs, strict=True):
            full = hf.generate(
                torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
            )
            assert out.token_ids == full[0, len(prompt) :].tolist(), f"{len(prompt)}-token prompt diverged"
            expected = hf(full).logits[0, len(prompt) - 1 : len(prompt) - 1 + NEW_TOKENS]
            ours = torch.stack(llm.engine.recorded_logits[out.request_id])
            assert (ours - expected).abs().max() / expected.abs().max() < 1e-4
    return llm


def _allocated_like_specs(llm: LLM, specs) -> None:
    runner = llm.engine.runner
    assert runner.kv_cache_specs() == specs
    for attn, spec in zip(runner.model.attention_layers(), specs, strict=True):
        assert attn.sliding_window == getattr(spec, "window", None)
        shape = spec.cache_shape(runner.num_blocks)
        assert (2, *attn.k_cache.shape) == shape and attn.v_cache.shape == attn.k_cache.shape
        # K and V are the two halves of the layer's one tensor
        assert attn.v_cache.data_ptr() - attn.k_cache.data_ptr() == attn.k_cache.nbytes
        assert attn.k_cache.untyped_storage().nbytes() == spec.block_bytes * runner.num_blocks


def test_mistral_window_is_a_sliding_window_spec_on_every_layer(tiny_models):
    cfg = load_model_config(tiny_models["mistral"])
    specs = kv_cache_specs(cfg, BLOCK, "float32")
    assert specs == [SlidingWindowSpec(**SHAPE, window=24)] * 2
    # Sizing sums the specs: K+V x 2 KV heads x 16 dims x fp32, 16 tokens, two layers.
    assert block_bytes(cfg, BLOCK, torch.float32) == total_block_bytes(specs) == 2 * (16 * 2 * 2 * 16 * 4)
    # Each of two tensor-parallel ranks holds one KV head.
    assert block_bytes(cfg, BLOCK, torch.float32, tp=2) == total_block_bytes(specs) // 2


def test_mistral_with_a_sliding_window_matches_transformers(tiny_models):
    llm = _greedy_matches_transformers(
        tiny_models["mistral"], (9, 40, 61), num_gpu_blocks=20, max_model_len=256
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
    llm = _greedy_matches_transformers(path, (5, 30))
    _allocated_like_specs(llm, specs)
