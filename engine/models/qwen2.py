"""Qwen2: the Llama decoder with a bias on the q/k/v projections; layers may use a sliding window."""

from __future__ import annotations

from engine.checkpoint.model_config import ModelConfig
from engine.models.llama import register_llama_family, windowed_llama_config


def parse_qwen2_config(raw: dict, architecture: str) -> ModelConfig:
    return windowed_llama_config(raw, architecture, qkv_bias=True)


QWEN2 = register_llama_family("Qwen2ForCausalLM", parse_qwen2_config)
