"""Llama: the base of the Llama family. Its config parser and per-layer KV specs are shared by the
family's other architecture modules (Mistral, Qwen2, Qwen3), as is the decoder they all build
(``engine.models.decoder``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from engine.checkpoint.model_config import ModelConfig, checkpoint_dtype, positive_int
from engine.kv.specs import FullAttentionSpec, KVCacheSpec, SlidingWindowSpec
from engine.models.registry import Architecture, register

DECODER = "engine.models.decoder:CausalLM"
ROPE_TYPES = ("default", "linear", "llama3", "yarn")
# The gated MLP's activations (engine.layers.mlp): SwiGLU, and Gemma's GeGLU with the tanh GELU.
ACTIVATIONS = ("silu", "gelu_pytorch_tanh")


def parse_llama_config(raw: dict, architecture: str) -> ModelConfig:
    """A Llama-family config.json: plain attention on every layer (no window), no q/k norm."""
    num_heads = positive_int(raw, "num_attention_heads")
    hidden = positive_int(raw, "hidden_size")
    head_dim = raw.get("head_dim") or hidden // num_heads
    num_kv = raw.get("num_key_value_heads") or num_heads
    if num_heads % num_kv:
        raise ValueError(f"num_attention_heads={num_heads} is not a multiple of num_key_value_heads={num_kv}")
    num_layers = positive_int(raw, "num_hidden_layers")
    rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    rope_theta = float(rope.pop("rope_theta", raw.get("rope_theta", 10000.0)))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope_type {rope_type!r} is not supported ({', '.join(ROPE_TYPES)})")
    max_positions = int(raw.get("max_position_embeddings", 4096))
    if rope_type == "yarn":  # transformers' defaults: the context the model was trained at, and its ratio
        rope.setdefault("original_max_position_embeddings", max_positions)
        if rope.get("factor") is None:
            rope["factor"] = max_positions / rope["original_max_position_embeddings"]
    return ModelConfig(
        architecture=architecture,
        vocab_size=positive_int(raw, "vocab_size"),
        hidden_size=hidden,
        intermediate_size=positive_int(raw, "intermediate_size"),
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv,
        head_dim=int(head_dim),
        max_position_embeddings=max_positions,
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=rope_theta,
        rope_scaling=None if rope_type == "default" else dict(rope, rope_type=rope_type),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        qkv_bias=bool(raw.get("attention_bias", False)),
        qk_norm=False,
        sliding_windows=[None] * num_layers,
        dtype=checkpoint_dtype(raw),
        hidden_act=gated_activation(raw.get("hidden_act") or "silu"),
    )


def gated_activation(name: str) -> str:
    """``name`` if the gated MLP has it, else a ValueError naming the ones it has."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not supported ({', '.join(ACTIVATIONS)})")
    return name


def sliding_windows(raw: dict, num_layers: int) -> list[int | None]:
    """Each layer's attention window (None: full attention) from ``sliding_window`` and, in Qwen2/3
    and newer configs, ``layer_types``."""
    window = raw.get("sliding_window")
    layer_types = raw.get("layer_types")
    if layer_types:
        if len(layer_types) != num_layers:
            raise ValueError(f"layer_types has {len(layer_types)} entries for {num_layers} layers")
        return [window if t == "sliding_attention" and window else None for t in layer_types]
    if raw.get("use_sliding_window") is False:
        return [None] * num_layers
    return [int(window) if window else None] * num_layers


def attention_kv_specs(cfg: ModelConfig, block_size: int, dtype: str, tp: int = 1) -> list[KVCacheSpec]:
    """K and V per KV head on every layer; a windowed layer says its window."""
    # One rank's KV heads, as in engine.distributed.sharding.kv_heads_per_rank (a package that imports
    # torch): a replica of one head when there are fewer heads than ranks.
    heads = max(1, cfg.num_kv_heads // tp)
    shape = dict(block_size=block_size, dtype=dtype, num_kv_heads=heads, head_dim=cfg.head_dim)
    return [
        FullAttentionSpec(**shape) if window is None else SlidingWindowSpec(**shape, window=window)
        for window in cfg.sliding_windows
    ]


def windowed_llama_config(raw: dict, architecture: str, **changes) -> ModelConfig:
    """A Llama-family config whose layers may use a sliding window (``sliding_windows``), with the
    architecture's own ``changes`` on top (Mistral, Qwen2, Qwen3)."""
    cfg = parse_llama_config(raw, architecture)
    return replace(cfg, sliding_windows=sliding_windows(raw, cfg.num_layers), **changes)


def register_llama_family(name: str, parse_config: Callable[[dict, str], ModelConfig]) -> Architecture:
    """Register an architecture that builds the Llama decoder with attention KV specs on every layer."""
    return register(
        Architecture(
            names=(name,), parse_config=parse_config, kv_cache_specs=attention_kv_specs, model_class=DECODER
        )
    )


LLAMA = register_llama_family("LlamaForCausalLM", parse_llama_config)
