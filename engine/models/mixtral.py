"""Mixtral: the Mistral decoder whose every MLP is a mixture of ``num_local_experts`` experts of
``intermediate_size``, softmax top-k routing always renormalised over the chosen experts."""

from __future__ import annotations

from dataclasses import replace

from engine.checkpoint.model_config import ModelConfig, positive_int
from engine.checkpoint.moe_config import MoEConfig
from engine.models.llama import register_llama_family, windowed_llama_config


def parse_mixtral_config(raw: dict, architecture: str) -> ModelConfig:
    cfg = windowed_llama_config(raw, architecture)
    moe = MoEConfig(
        num_experts=positive_int(raw, "num_local_experts"),
        top_k=positive_int(raw, "num_experts_per_tok"),
        intermediate_size=cfg.intermediate_size,
        moe_layers=(True,) * cfg.num_layers,
        renormalize=True,
    )
    return replace(cfg, moe=moe)


MIXTRAL = register_llama_family("MixtralForCausalLM", parse_mixtral_config)
