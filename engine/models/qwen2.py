"""Qwen2: the Llama decoder with a bias on the q/k/v projections; layers may use a sliding window."""

from __future__ import annotations

from dataclasses import replace

from engine.checkpoint.model_config import ModelConfig
from engine.models.llama import DECODER, attention_kv_specs, parse_llama_config, sliding_windows
from engine.models.registry import Architecture, register


def parse_qwen2_config(raw: dict, architecture: str) -> ModelConfig:
    cfg = parse_llama_config(raw, architecture)
    return replace(cfg, qkv_bias=True, sliding_windows=sliding_windows(raw, cfg.num_layers))


QWEN2 = register(
    Architecture(
        names=("Qwen2ForCausalLM",),
        parse_config=parse_qwen2_config,
        kv_cache_specs=attention_kv_specs,
        model_class=DECODER,
    )
)
