"""What serving a checkpoint costs, from its ModelConfig alone (no weights read): parameters in total
and per token, weight bytes, KV cache bytes per token, and the memory each tensor-parallel rank of a
replica needs. Pure Python (no torch): the control plane computes these when it validates a checkpoint.

Counting conventions:

- ``total``: every tensor of the decoder the checkpoint stores: embeddings, the LM head unless tied,
  norms, biases, every expert, the router (and DeepSeek-V3's ``e_score_correction_bias``), without
  DeepSeek-V3's multi-token-prediction layer (stored, but no part of decoding). It equals
  transformers' count of the same architecture (tests/engine/checkpoint/test_model_facts.py).
- ``active``: the weights one token's forward pass multiplies by: the dense parts of every layer, per
  MoE layer its router, its shared experts and ``top_k`` routed experts, and the LM head; not the
  input embedding table, of which a token reads one row. DeepSeek publishes this figure
  (DeepSeek-V2-Lite: 2.45 B, "2.4 B activated"; V3: 36.6 B, "37 B") and it is what a batch-1
  decode step reads.
  Qwen's and Mistral's cards count the input embedding table as active too, ``active +
  input_embedding`` here: Qwen3-30B-A3B 3.04 B + 0.31 B = 3.35 B ("3.3 B"), Mixtral-8x7B 12.9 B.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from engine.checkpoint.model_config import ModelConfig
from engine.kv.specs import DTYPE_BYTES, total_bytes_per_token
from engine.models.registry import kv_cache_specs

# Tensor-parallel sizes whose KV bytes per token validation records (an MLA latent or a KV head
# fewer than the ranks is replicated, so the figure is not the tp=1 one divided).
RECORDED_TP_SIZES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class ParameterCounts:
    total: int
    active: int  # per token, the input embedding table left out (module docstring)
    input_embedding: int  # the embedding table when it is not the LM head's (tied: 0)


@dataclass(frozen=True)
class ModelFacts:
    """A checkpoint's facts as the control plane stores them; bytes at the checkpoint's dtype."""

    total_parameters: int
    active_parameters: int
    input_embedding_parameters: int
    weight_bytes: int
    kv_bytes_per_token: int  # all layers, one device (tp=1), KV cache in the checkpoint's dtype
    kv_bytes_per_token_by_tp: dict[int, int]  # one rank's share at each of RECORDED_TP_SIZES

    def to_dict(self) -> dict:
        return asdict(self)


def parameter_counts(cfg: ModelConfig) -> ParameterCounts:
    table = cfg.vocab_size * cfg.hidden_size
    total = active = cfg.hidden_size  # the final norm
    for layer in range(cfg.num_layers):
        # + input and post-attention norms (and Gemma's pre- and post-feedforward ones)
        dense = _attention_parameters(cfg) + (4 if cfg.sandwich_norms else 2) * cfg.hidden_size
        mlp_total, mlp_active = _mlp_parameters(cfg, layer)
        total += dense + mlp_total
        active += dense + mlp_active
    active += table  # the LM head, tied or not
    total += table if cfg.tie_word_embeddings else 2 * table
    return ParameterCounts(total, active, 0 if cfg.tie_word_embeddings else table)


def weight_bytes(parameters: int, dtype: str) -> int:
    return parameters * DTYPE_BYTES[dtype]


def kv_bytes_per_token(cfg: ModelConfig, dtype: str | None = None, tp: int = 1) -> int:
    """Every layer's KV cache spec (``engine.models.registry``) summed, on one of ``tp`` ranks."""
    return total_bytes_per_token(kv_cache_specs(cfg, block_size=1, dtype=dtype or cfg.dtype, tp=tp))


def device_memory_bytes(weights: int, tp: int, kv_per_token: int, tokens: int) -> int:
    """One rank of a ``tp``-way replica: its even share of the weights plus the KV cache of ``tokens``
    tokens at that rank's ``kv_per_token``. The few tensors every rank keeps whole (norms, router,
    a replicated KV head) are left out, as are activations and CUDA graphs."""
    return -(-weights // tp) + kv_per_token * tokens


def model_facts(cfg: ModelConfig) -> ModelFacts:
    counts = parameter_counts(cfg)
    return ModelFacts(
        total_parameters=counts.total,
        active_parameters=counts.active,
        input_embedding_parameters=counts.input_embedding,
        weight_bytes=weight_bytes(counts.total, cfg.dtype),
        kv_bytes_per_token=kv_bytes_per_token(cfg),
        kv_bytes_per_token_by_tp={tp: kv_bytes_per_token(cfg, tp=tp) for tp in RECORDED_TP_SIZES},
    )


def _attention_parameters(cfg: ModelConfig) -> int:
    h, mla = cfg.hidden_size, cfg.mla
    if mla is None:
        q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        bias = q + 2 * kv if cfg.qkv_bias else 0
        qk_norms = 2 * cfg.head_dim if cfg.qk_norm else 0
        return h * (q + 2 * kv) + q * h + bias + qk_norms
    heads, latent = cfg.num_heads, mla.kv_lora_rank
    q_width = heads * mla.qk_head_dim
    if mla.q_lora_rank is None:
        query = h * q_width  # q_proj
    else:  # q_a_proj, q_a_layernorm, q_b_proj
        query = h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * q_width
    # kv_a_proj_with_mqa (the latent and the shared rotary key), kv_a_layernorm, kv_b_proj
    key_value = (
        h * (latent + mla.qk_rope_head_dim)
        + latent
        + latent * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    )
    return query + key_value + heads * mla.v_head_dim * h  # + o_proj


def _mlp_parameters(cfg: ModelConfig, layer: int) -> tuple[int, int]:
    """(total, active per token) of one layer's MLP: SwiGLU's gate, up and down projections."""
    h, moe = cfg.hidden_size, cfg.moe
    if moe is None or not moe.moe_layers[layer]:
        dense = 3 * h * cfg.intermediate_size
        return dense, dense
    expert = 3 * h * moe.intermediate_size
    router = moe.num_experts * h + (moe.num_experts if moe.score_correction_bias else 0)
    always = router + 3 * h * moe.shared_intermediate_size
    return always + moe.num_experts * expert, always + moe.top_k * expert
