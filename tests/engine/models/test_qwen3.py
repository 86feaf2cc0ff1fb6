"""Qwen3 (engine/models/qwen3.py): the Llama decoder with an RMSNorm on every query and key head,
parsed, built and run against transformers on a tiny checkpoint."""

import json
import shutil

import torch
from transformers import AutoModelForCausalLM

from engine import LLM, SamplingParams
from engine.checkpoint import load_model_config
from engine.kv.specs import FullAttentionSpec
from engine.models import registry
from engine.models.qwen3 import QWEN3

NEW_TOKENS = 8


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
    hf = AutoModelForCausalLM.from_pretrained(tiny_qwen3, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None  # full-length runs, as ours with ignore_eos
    gen = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, hf.config.vocab_size, (n,), generator=gen).tolist() for n in (6, 29)]
    llm = LLM(tiny_qwen3, device="cpu", dtype="float32")
    llm.engine.runner.keep_logits = True
    for layer in llm.engine.runner.model.layers:  # the q/k norm really is in the built model
        assert layer.self_attn.q_norm is not None and layer.self_attn.k_norm is not None
    outs = llm.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True))
    with torch.no_grad():
        for prompt, out in zip(prompts, outs, strict=True):
            full = hf.generate(
                torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
            )
            assert out.token_ids == full[0, len(prompt) :].tolist()
            expected = hf(full).logits[0, len(prompt) - 1 : len(prompt) - 1 + NEW_TOKENS]
            ours = torch.stack(llm.engine.recorded_logits[out.request_id])
            assert (ours - expected).abs().max() / expected.abs().max() < 1e-4
