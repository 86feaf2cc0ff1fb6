"""Qwen3-MoE: the Qwen3 decoder (q/k norm) whose MLPs are mixtures of experts: softmax top-k routing,
renormalised when ``norm_topk_prob`` says so, no shared expert. A layer is dense (of
``intermediate_size``) when it is in ``mlp_only_layers`` or off the ``decoder_sparse_step`` beat."""

from __future__ import annotations

from dataclasses import replace

from engine.checkpoint.model_config import ModelConfig, positive_int
from engine.checkpoint.moe_config import MoEConfig
from engine.models.llama import register_llama_family
from engine.models.qwen3 import parse_qwen3_config


def parse_qwen3_moe_config(raw: dict, architecture: str) -> ModelConfig:
    cfg = parse_qwen3_config(raw, architecture)
    step = int(raw.get("decoder_sparse_step", 1))
    dense = set(raw.get("mlp_only_layers") or [])
    # Hub configs say num_experts; transformers v5 writes its alias num_local_experts.
    experts_key = "num_experts" if "num_experts" in raw else "num_local_experts"
    moe = MoEConfig(
        num_experts=positive_int(raw, experts_key),
        top_k=positive_int(raw, "num_experts_per_tok"),
        intermediate_size=positive_int(raw, "moe_intermediate_size"),
        moe_layers=tuple(i not in dense and step > 0 and (i + 1) % step == 0 for i in range(cfg.num_layers)),
        renormalize=bool(raw.get("norm_topk_prob", False)),
    )
    return replace(cfg, moe=moe)


QWEN3_MOE = register_llama_family("Qwen3MoeForCausalLM", parse_qwen3_moe_config)
