"""Mistral: the Llama decoder, with a sliding attention window on every layer when the config sets one."""

from __future__ import annotations

from dataclasses import replace

from engine.checkpoint.model_config import ModelConfig
from engine.models.llama import DECODER, attention_kv_specs, parse_llama_config, sliding_windows
from engine.models.registry import Architecture, register


def parse_mistral_config(raw: dict, architecture: str) -> ModelConfig:
    cfg = parse_llama_config(raw, architecture)
    return replace(cfg, sliding_windows=sliding_windows(raw, cfg.num_layers))


MISTRAL = register(
    Architecture(
        names=("MistralForCausalLM",),
        parse_config=parse_mistral_config,
        kv_cache_specs=attention_kv_specs,
        model_class=DECODER,
    )
)
