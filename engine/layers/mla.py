"""Multi-head latent attention (DeepSeek-V2/V3) for one decoder layer: the projections around the
paged latent attention (``engine.layers.latent_attention``).

The normed hidden state goes through one fused input projection (``qkv_proj``): the query's
low-rank ``q_a_proj`` (q-LoRA) or its full ``q_proj``, stacked with ``kv_a_proj_with_mqa``, which
gives each token's compressed latent ``c`` (``kv_lora_rank``) and the rotary key part shared by all
heads (``qk_rope_head_dim``). With q-LoRA the query then goes through ``q_a_layernorm`` and
``q_b_proj``; ``c`` through ``kv_a_layernorm``; ``kv_b_proj`` expands latents into each head's no-rope
key and value; ``o_proj`` mixes the heads' values.

Tensor parallel: each rank keeps num_heads / k heads (their rows of q_proj / q_b_proj / kv_b_proj,
their columns of o_proj, which all-reduces); the latent path (q_a, kv_a and their norms) and the
latent cache are replicated on every rank.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.checkpoint.model_config import ModelConfig
from engine.distributed.group import SINGLE, TPGroup
from engine.distributed.sharding import q_head_rows
from engine.layers.attention import AttentionMetadata
from engine.layers.latent_attention import LatentAttention
from engine.layers.norm import RMSNorm
from engine.layers.parallel_linear import ColumnParallelLinear, RowParallelLinear
from engine.layers.rotary import RotaryEmbedding
from kernels.rotary import yarn_softmax_scale

# transformers and DeepSeek's own code build q_a_layernorm and kv_a_layernorm with RMSNorm's
# default epsilon, not the config's rms_norm_eps.
LATENT_NORM_EPS = 1e-6


def mla_rotary(cfg: ModelConfig, max_position: int, device: torch.device) -> RotaryEmbedding:
    """The rotary embedding of the ``qk_rope_head_dim`` part, pairs laid out as the config says."""
    return RotaryEmbedding(
        cfg.mla.qk_rope_head_dim,
        max_position,
        cfg.rope_theta,
        cfg.rope_scaling,
        device,
        is_neox=not cfg.mla.rope_interleave,
    )


class MLAAttention(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        layer: int,
        rotary: RotaryEmbedding,
        dtype: torch.dtype,
        device: torch.device,
        tp: TPGroup = SINGLE,
    ) -> None:
        super().__init__()
        mla = cfg.mla
        k = tp.world_size
        self.num_heads = cfg.num_heads // k
        self.mla = mla
        latent_width = mla.kv_lora_rank + mla.qk_rope_head_dim
        full_q = cfg.num_heads * mla.qk_head_dim
        q_rows = q_head_rows(cfg.num_heads, mla.qk_head_dim, k, tp.rank)
        if mla.q_lora_rank is None:
            q_sizes, q_slice = full_q, q_rows
        else:
            q_sizes, q_slice = mla.q_lora_rank, (0, mla.q_lora_rank)
        self.q_width = q_slice[1]
        self.qkv_proj = ColumnParallelLinear(
            cfg.hidden_size, [q_sizes, latent_width], [q_slice, (0, latent_width)], False, dtype, device
        )
        self.q_a_layernorm = self.q_b_proj = None
        if mla.q_lora_rank is not None:
            self.q_a_layernorm = RMSNorm(mla.q_lora_rank, LATENT_NORM_EPS, dtype, device)
            self.q_b_proj = ColumnParallelLinear(mla.q_lora_rank, [full_q], [q_rows], False, dtype, device)
        self.kv_a_layernorm = RMSNorm(mla.kv_lora_rank, LATENT_NORM_EPS, dtype, device)
        kv_b_head = mla.qk_nope_head_dim + mla.v_head_dim
        self.kv_b_proj = ColumnParallelLinear(
            mla.kv_lora_rank,
            [cfg.num_heads * kv_b_head],
            [q_head_rows(cfg.num_heads, kv_b_head, k, tp.rank)],
            False,
            dtype,
            device,
        )
        full_v = cfg.num_heads * mla.v_head_dim
        v_cols = q_head_rows(cfg.num_heads, mla.v_head_dim, k, tp.rank)
        self.o_proj = RowParallelLinear(full_v, v_cols, cfg.hidden_size, False, dtype, device, tp)
        self.attn = LatentAttention(
            self.num_heads,
            mla.kv_lora_rank,
            mla.qk_nope_head_dim,
            mla.qk_rope_head_dim,
            mla.v_head_dim,
            mla.qk_head_dim**-0.5 * yarn_softmax_scale(cfg.rope_scaling),
            rotary,
        )

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        return self.attend(positions, self.qkv_proj(x), meta)

    def attend(self, positions: torch.Tensor, qkv: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """The rest of ``forward`` after the fused input projection (which the caller may have fused
        with the norm before it)."""
        mla, t = self.mla, qkv.shape[0]
        q, latent = qkv.split([self.q_width, mla.kv_lora_rank + mla.qk_rope_head_dim], dim=-1)
        if self.q_b_proj is not None:
            q = self.q_b_proj(self.q_a_layernorm(q))
        q = q.reshape(t, self.num_heads, mla.qk_head_dim)
        q_nope, q_rope = q.split([mla.qk_nope_head_dim, mla.qk_rope_head_dim], dim=-1)
        out = self.attn(positions, q_nope, q_rope, latent, self.kv_a_layernorm, self.kv_b_proj.weight, meta)
        return self.o_proj(out.reshape(t, self.num_heads * mla.v_head_dim))
