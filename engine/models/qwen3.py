"""Qwen3: the Llama decoder with an RMSNorm on every query and key head before RoPE; q/k/v carry a
bias only when ``attention_bias`` says so, and layers may use a sliding window (``layer_types``)."""

from __future__ import annotations

from engine.checkpoint.model_config import ModelConfig
from engine.models.llama import register_llama_family, windowed_llama_config


def parse_qwen3_config(raw: dict, architecture: str) -> ModelConfig:
    return windowed_llama_config(raw, architecture, qk_norm=True)


QWEN3 = register_llama_family("Qwen3ForCausalLM", parse_qwen3_config)
