"""Gemma-3 (text, ``Gemma3ForCausalLM``, model_type ``gemma3_text``): Gemma-2's decoder
(``engine.models.gemma2``) with an RMSNorm (``1 + weight``) on every query and key head, five local
layers to one global by default (``sliding_window_pattern`` 6, or ``layer_types``), and a RoPE base
of its own on the local layers: ``rope_local_base_freq`` (10,000), unscaled, against the global
layers' ``rope_theta`` (1,000,000) and ``rope_scaling``. transformers 5 writes both as
``rope_parameters: {"full_attention": {...}, "sliding_attention": {...}}``.

Soft-capping is off unless the config sets it. ``final_logit_softcapping`` is applied as in Gemma-2;
``attn_logit_softcapping`` is not, as transformers' Gemma-3 attention never passes it on (the q/k
norm took its place), so a config that sets it is served as transformers runs it.
"""

from __future__ import annotations

from engine.checkpoint.model_config import ModelConfig
from engine.models.gemma2 import gemma_config
from engine.models.llama import register_llama_family

# transformers' Gemma3TextConfig defaults for the keys that shape the model.
GEMMA3_DEFAULTS = {
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0,
    "rope_local_base_freq": 10_000.0,
    "tie_word_embeddings": True,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "attn_logit_softcapping": None,
    "final_logit_softcapping": None,
}
GEMMA3_SLIDING_WINDOW_PATTERN = 6
_LAYER_TYPE_ROPE = ("full_attention", "sliding_attention")


def parse_gemma3_config(raw: dict, architecture: str) -> ModelConfig:
    raw = {**GEMMA3_DEFAULTS, **raw}
    rope = raw.get("rope_parameters")
    local_theta = float(raw["rope_local_base_freq"])
    if isinstance(rope, dict) and any(key in rope for key in _LAYER_TYPE_ROPE):
        # Per layer type: the global layers' parameters are what the Llama parser reads.
        global_rope = dict(rope.get("full_attention") or {})
        global_rope.setdefault("rope_theta", GEMMA3_DEFAULTS["rope_theta"])
        local_rope = dict(rope.get("sliding_attention") or {})
        local_type = local_rope.get("rope_type", local_rope.get("type", "default"))
        if local_type != "default":
            raise ValueError(f"rope_type {local_type!r} on the sliding-window layers is not supported")
        local_theta = float(local_rope.get("rope_theta", local_theta))
        raw = dict(raw, rope_parameters=global_rope, rope_scaling=None)
    return gemma_config(
        raw,
        architecture,
        GEMMA3_DEFAULTS,
        GEMMA3_SLIDING_WINDOW_PATTERN,
        qk_norm=True,
        local_rope_theta=local_theta,
        attn_logit_softcap=None,  # as transformers: see the module docstring
    )


GEMMA3 = register_llama_family("Gemma3ForCausalLM", parse_gemma3_config)
