"""Gemma-2: the Llama decoder with Gemma's options (``ModelConfig``'s Gemma fields), and the config
parser Gemma-3 builds on.

What sets the family apart: local (sliding-window) and global layers interleaved by ``layer_types``
(older configs: every ``sliding_window_pattern``-th layer global, 2 for Gemma-2), RMSNorm scaling by
``1 + weight``, four norms a layer (input, post-attention, pre- and post-feedforward), the embedding
times sqrt(hidden_size), a GeGLU MLP (``hidden_activation``), the softmax scale
``query_pre_attn_scalar ** -0.5``, tied embeddings, and tanh soft-capping of the attention scores
(``attn_logit_softcapping``, 50 in Gemma-2) and of the final logits (``final_logit_softcapping``, 30).

Keys a config leaves out mean what transformers' config class defaults them to (a Gemma-2
config.json without ``attn_logit_softcapping`` caps at 50, one without ``tie_word_embeddings`` ties).
"""

from __future__ import annotations

from dataclasses import replace

from engine.checkpoint.model_config import ModelConfig
from engine.models.llama import gated_activation, parse_llama_config, register_llama_family, sliding_windows

# transformers' Gemma2Config defaults for the keys that shape the model.
GEMMA2_DEFAULTS = {
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
}
GEMMA2_SLIDING_WINDOW_PATTERN = 2  # local, global, local, ...


def gemma_config(raw: dict, architecture: str, defaults: dict, pattern: int, **changes) -> ModelConfig:
    """A Gemma-family config.json over its class ``defaults``; layers are local or global by
    ``layer_types``, else every ``pattern``-th (``sliding_window_pattern``) is global. ``changes``:
    the architecture's own fields on top (Gemma-3's q/k norm and local RoPE base)."""
    raw = {**defaults, **raw}
    if raw.get("use_bidirectional_attention"):
        raise ValueError("use_bidirectional_attention is not supported: the decoder attends causally")
    cfg = parse_llama_config(raw, architecture)
    pattern = int(raw.get("sliding_window_pattern") or pattern)
    layer_types = raw.get("layer_types") or [
        "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(cfg.num_layers)
    ]
    fields = dict(
        sliding_windows=sliding_windows(dict(raw, layer_types=layer_types), cfg.num_layers),
        hidden_act=gated_activation(raw["hidden_activation"]),
        attention_scale=float(raw["query_pre_attn_scalar"]) ** -0.5,
        attn_logit_softcap=softcap(raw, "attn_logit_softcapping"),
        final_logit_softcap=softcap(raw, "final_logit_softcapping"),
        embedding_multiplier=cfg.hidden_size**0.5,
        norm_weight_offset=1.0,
        sandwich_norms=True,
    )
    return replace(cfg, **{**fields, **changes})


def softcap(raw: dict, key: str) -> float | None:
    """A soft-capping value: None (off) or a positive number."""
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"{key} must be a positive number or null, got {value!r}")
    return float(value)


def parse_gemma2_config(raw: dict, architecture: str) -> ModelConfig:
    return gemma_config(raw, architecture, GEMMA2_DEFAULTS, GEMMA2_SLIDING_WINDOW_PATTERN)


GEMMA2 = register_llama_family("Gemma2ForCausalLM", parse_gemma2_config)
