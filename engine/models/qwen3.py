"""Qwen3: the Llama decoder with an RMSNorm on every query and key head before RoPE; q/k/v carry a
bias only when ``attention_bias`` says so, and layers may use a sliding window (``layer_types``)."""

from __future__ import annotations

from dataclasses import replace

from engine.checkpoint.model_config import ModelConfig
from engine.models.llama import DECODER, attention_kv_specs, parse_llama_config, sliding_windows
from engine.models.registry import Architecture, register


def parse_qwen3_config(raw: dict, architecture: str) -> ModelConfig:
    cfg = parse_llama_config(raw, architecture)
    return replace(cfg, qk_norm=True, sliding_windows=sliding_windows(raw, cfg.num_layers))


QWEN3 = register(
    Architecture(
        names=("Qwen3ForCausalLM",),
        parse_config=parse_qwen3_config,
        kv_cache_specs=attention_kv_specs,
        model_class=DECODER,
    )
)
