"""DeepSeek-V2: the Llama-family decoder with multi-head latent attention (``engine.layers.mla``)
on every layer, and mixture-of-experts MLPs after the first ``first_k_dense_replace`` dense ones:
softmax router, ``greedy`` or ``group_limited_greedy`` top-k (groups ranked by their best expert),
shared experts. Rotary pairs are interleaved (DeepSeek's complex-number RoPE) on the rope part only.

``parse_deepseek_config`` is shared with DeepSeek-V3 (``deepseek_v3.py``), which changes the router
and may add multi-token-prediction layers.
"""

from __future__ import annotations

from dataclasses import replace

from engine.checkpoint.mla_config import MLAConfig
from engine.checkpoint.model_config import ModelConfig, positive_int
from engine.checkpoint.moe_config import MoEConfig
from engine.kv.specs import KVCacheSpec, MLASpec
from engine.models.llama import DECODER, parse_llama_config
from engine.models.registry import Architecture, register

TOPK_METHODS = {"greedy": "max", "group_limited_greedy": "max", "noaux_tc": "top2_sum"}


def parse_deepseek_config(
    raw: dict, architecture: str, topk_method: str = "greedy", **moe_changes
) -> ModelConfig:
    """A DeepSeek-V2/V3 config.json; ``topk_method``: the default where the config names none,
    ``moe_changes``: the architecture's router facts on top."""
    if raw.get("attention_bias"):
        raise ValueError("attention_bias is not supported for multi-head latent attention")
    cfg = parse_llama_config(raw, architecture)
    mla = MLAConfig(
        q_lora_rank=positive_int(raw, "q_lora_rank") if raw.get("q_lora_rank") is not None else None,
        kv_lora_rank=positive_int(raw, "kv_lora_rank"),
        qk_nope_head_dim=positive_int(raw, "qk_nope_head_dim"),
        qk_rope_head_dim=positive_int(raw, "qk_rope_head_dim"),
        v_head_dim=positive_int(raw, "v_head_dim"),
        rope_interleave=bool(raw.get("rope_interleave", True)),
    )
    if mla.qk_rope_head_dim % 2:
        raise ValueError(f"qk_rope_head_dim={mla.qk_rope_head_dim} must be even")
    # Every head reads the one latent: as many "KV heads" as query heads, each of qk_head_dim.
    return replace(
        cfg,
        num_kv_heads=cfg.num_heads,
        head_dim=mla.qk_head_dim,
        mla=mla,
        moe=_moe_config(raw, cfg.num_layers, raw.get("topk_method") or topk_method, **moe_changes),
    )


def _moe_config(raw: dict, num_layers: int, method: str, **changes) -> MoEConfig | None:
    if not raw.get("n_routed_experts"):
        return None  # a dense DeepSeek
    if method not in TOPK_METHODS:
        raise ValueError(f"topk_method {method!r} is not one of {', '.join(TOPK_METHODS)}")
    grouped = method != "greedy"
    first_dense = int(raw.get("first_k_dense_replace") or 0)
    freq = int(raw.get("moe_layer_freq") or 1)
    fields = dict(
        num_experts=positive_int(raw, "n_routed_experts"),
        top_k=positive_int(raw, "num_experts_per_tok"),
        intermediate_size=positive_int(raw, "moe_intermediate_size"),
        moe_layers=tuple(i >= first_dense and i % freq == 0 for i in range(num_layers)),
        scoring=raw.get("scoring_func") or "softmax",
        renormalize=bool(raw.get("norm_topk_prob", False)),
        num_groups=int(raw.get("n_group") or 1) if grouped else 1,
        topk_groups=int(raw.get("topk_group") or 1) if grouped else 1,
        group_score=TOPK_METHODS[method],
        routed_scaling_factor=float(raw.get("routed_scaling_factor", 1.0)),
        shared_intermediate_size=int(raw.get("n_shared_experts") or 0) * int(raw["moe_intermediate_size"]),
    )
    fields.update(changes)
    return MoEConfig(**fields)


def mla_kv_specs(cfg: ModelConfig, block_size: int, dtype: str, tp: int = 1) -> list[KVCacheSpec]:
    """One latent per token per layer; every tensor-parallel rank holds all of it (heads split, the
    latent they share replicated)."""
    spec = MLASpec(
        block_size=block_size,
        dtype=dtype,
        kv_lora_rank=cfg.mla.kv_lora_rank,
        rope_head_dim=cfg.mla.qk_rope_head_dim,
    )
    return [spec] * cfg.num_layers


def parse_deepseek_v2_config(raw: dict, architecture: str) -> ModelConfig:
    return parse_deepseek_config(raw, architecture)


DEEPSEEK_V2 = register(
    Architecture(
        names=("DeepseekV2ForCausalLM",),
        parse_config=parse_deepseek_v2_config,
        kv_cache_specs=mla_kv_specs,
        model_class=DECODER,
    )
)
