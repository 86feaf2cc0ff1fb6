"""The DeepSeek-V2/V3 shapes of ``engine.testing.tiny_model``: multi-head latent attention (q-LoRA
off in V2, on in V3), YaRN, a dense first layer then mixtures of experts with group-limited routing
and a shared expert, and in V3 one multi-token-prediction layer after the decoder layers. Tensors
are named as the hub stores them (one tensor per expert projection), which transformers loads."""

from __future__ import annotations

DEEPSEEK_ARCHES = ("deepseek_v2", "deepseek_v3")
Q_LORA_RANK, KV_LORA_RANK, QK_NOPE_HEAD_DIM, QK_ROPE_HEAD_DIM, V_HEAD_DIM = 24, 32, 16, 8, 12
EXPERTS, TOP_K, MOE_INTERMEDIATE, SHARED_EXPERTS, GROUPS, TOPK_GROUPS = 8, 2, 32, 1, 4, 2
FIRST_DENSE_LAYERS = 1
MTP_LAYERS = 1  # V3 only

_YARN = {
    # DeepSeek-V2-Lite's YaRN, but a short original context (factor = 1024 / 32) that prompts go past.
    "deepseek_v2": {
        "factor": 32.0,
        "original_max_position_embeddings": 32,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
    },
    # mscale != mscale_all_dim: cos/sin are scaled as well as the softmax.
    "deepseek_v3": {
        "factor": 32.0,
        "original_max_position_embeddings": 32,
        "mscale": 1.0,
        "mscale_all_dim": 0.8,
    },
}


def deepseek_config(arch: str, heads: int, num_layers: int) -> dict:
    """config.json fields of ``arch`` beyond the ones every tiny model shares."""
    v3 = arch == "deepseek_v3"
    fields = dict(
        num_key_value_heads=heads,  # MLA: every head reads the one latent
        q_lora_rank=Q_LORA_RANK if v3 else None,
        kv_lora_rank=KV_LORA_RANK,
        qk_nope_head_dim=QK_NOPE_HEAD_DIM,
        qk_rope_head_dim=QK_ROPE_HEAD_DIM,
        v_head_dim=V_HEAD_DIM,
        n_routed_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        moe_intermediate_size=MOE_INTERMEDIATE,
        n_shared_experts=SHARED_EXPERTS,
        first_k_dense_replace=min(FIRST_DENSE_LAYERS, num_layers),
        n_group=GROUPS,
        topk_group=TOPK_GROUPS,
        routed_scaling_factor=1.5,
        norm_topk_prob=v3,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "beta_fast": 32,
            "beta_slow": 1,
            **_YARN[arch],
        },
    )
    if v3:
        fields["num_nextn_predict_layers"] = MTP_LAYERS
    else:
        fields["topk_method"] = "group_limited_greedy"
    return fields


def deepseek_weight_shapes(
    arch: str, hidden: int, intermediate: int, heads: int, num_layers: int, vocab_size: int
) -> dict[str, tuple[int, ...]]:
    v3 = arch == "deepseek_v3"
    qk_head_dim = QK_NOPE_HEAD_DIM + QK_ROPE_HEAD_DIM
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab_size, hidden)}
    for i in range(num_layers + (MTP_LAYERS if v3 else 0)):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (hidden,)
        shapes[p + "post_attention_layernorm.weight"] = (hidden,)
        a = p + "self_attn."
        if v3:
            shapes[a + "q_a_proj.weight"] = (Q_LORA_RANK, hidden)
            shapes[a + "q_a_layernorm.weight"] = (Q_LORA_RANK,)
            shapes[a + "q_b_proj.weight"] = (heads * qk_head_dim, Q_LORA_RANK)
        else:
            shapes[a + "q_proj.weight"] = (heads * qk_head_dim, hidden)
        shapes[a + "kv_a_proj_with_mqa.weight"] = (KV_LORA_RANK + QK_ROPE_HEAD_DIM, hidden)
        shapes[a + "kv_a_layernorm.weight"] = (KV_LORA_RANK,)
        shapes[a + "kv_b_proj.weight"] = (heads * (QK_NOPE_HEAD_DIM + V_HEAD_DIM), KV_LORA_RANK)
        shapes[a + "o_proj.weight"] = (hidden, heads * V_HEAD_DIM)
        if i < FIRST_DENSE_LAYERS:
            shapes.update(_mlp(p + "mlp.", hidden, intermediate))
        else:
            shapes[p + "mlp.gate.weight"] = (EXPERTS, hidden)
            if v3:
                shapes[p + "mlp.gate.e_score_correction_bias"] = (EXPERTS,)
            for e in range(EXPERTS):
                shapes.update(_mlp(f"{p}mlp.experts.{e}.", hidden, MOE_INTERMEDIATE))
            shapes.update(_mlp(p + "mlp.shared_experts.", hidden, SHARED_EXPERTS * MOE_INTERMEDIATE))
        if i >= num_layers:  # the multi-token-prediction layer's own tensors
            shapes[p + "enorm.weight"] = (hidden,)
            shapes[p + "hnorm.weight"] = (hidden,)
            shapes[p + "eh_proj.weight"] = (hidden, 2 * hidden)
            shapes[p + "embed_tokens.weight"] = (vocab_size, hidden)
            shapes[p + "shared_head.norm.weight"] = (hidden,)
            shapes[p + "shared_head.head.weight"] = (vocab_size, hidden)
    shapes["model.norm.weight"] = (hidden,)
    shapes["lm_head.weight"] = (vocab_size, hidden)
    return shapes


def _mlp(prefix: str, hidden: int, intermediate: int) -> dict[str, tuple[int, ...]]:
    return {
        prefix + "gate_proj.weight": (intermediate, hidden),
        prefix + "up_proj.weight": (intermediate, hidden),
        prefix + "down_proj.weight": (hidden, intermediate),
    }
