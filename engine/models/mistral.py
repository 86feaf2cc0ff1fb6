"""Mistral: the Llama decoder, with a sliding attention window on every layer when the config sets one."""

from __future__ import annotations

from engine.checkpoint.model_config import ModelConfig
from engine.models.llama import register_llama_family, windowed_llama_config


def parse_mistral_config(raw: dict, architecture: str) -> ModelConfig:
    return windowed_llama_config(raw, architecture)


MISTRAL = register_llama_family("MistralForCausalLM", parse_mistral_config)
