"""The Llama-family decoder that the architecture modules (llama, mistral, qwen2, qwen3, gemma2,
gemma3) register as their model class; what sets them apart is parsed into ModelConfig by their own
module.

Options of the shared layers, as the config asks: a bias on q/k/v (Qwen2), an RMSNorm on each query
and key head before RoPE (Qwen3, Gemma-3), a sliding window per layer (Mistral, some Qwen layers,
Gemma's local layers, which may have a RoPE base of their own), an LM head tied to the embedding, a
mixture-of-experts MLP on the layers ``cfg.moe`` names (Qwen3-MoE, Mixtral: ``engine.layers.moe``;
the checkpoint's per-expert tensors load into stacked expert weights). Gemma's: RMSNorms scaling by
``1 + weight`` and four of them a layer (``sandwich_norms``: the attention's and the MLP's outputs are
normed before they join the residual stream), the embeddings scaled, a GeGLU MLP, the softmax scale
from the config, and soft-capped attention scores and logits.

Tensor parallel (``tp`` of world size k): each rank keeps num_heads / k query heads and their KV
heads (a replica of one when there are fewer KV heads than ranks), 1/k of the MLP rows and of the
vocabulary; o_proj, down_proj and the embedding all-reduce, the LM head gathers.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from engine.checkpoint.model_config import ModelConfig
from engine.distributed.group import SINGLE, TPGroup
from engine.distributed.sharding import kv_head_rows, kv_heads_per_rank, q_head_rows
from engine.layers.attention import AttentionMetadata, KVCacheLayer, PagedAttention, QKNorm
from engine.layers.embedding import Embedding, LMHead
from engine.layers.linear import Linear
from engine.layers.mla import MLAAttention, mla_rotary
from engine.layers.mlp import GatedMLP
from engine.layers.moe import EXPERT_PROJECTIONS, FusedExperts, MoE
from engine.layers.mtp import MTPWeights
from engine.layers.norm import RMSNorm
from engine.layers.parallel_linear import ColumnParallelLinear, RowParallelLinear
from engine.layers.rotary import RotaryEmbedding


class DecoderAttention(nn.Module):
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
        k, d = tp.world_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_heads // k,
            kv_heads_per_rank(cfg.num_kv_heads, k),
            d,
        )
        q_rows = q_head_rows(cfg.num_heads, d, k, tp.rank)
        kv_rows = kv_head_rows(cfg.num_kv_heads, d, k, tp.rank)
        full_q, full_kv = cfg.num_heads * d, cfg.num_kv_heads * d
        self.qkv_proj = ColumnParallelLinear(
            cfg.hidden_size,
            [full_q, full_kv, full_kv],
            [q_rows, kv_rows, kv_rows],
            cfg.qkv_bias,
            dtype,
            device,
        )
        self.o_proj = RowParallelLinear(full_q, q_rows, cfg.hidden_size, False, dtype, device, tp)
        offset = cfg.norm_weight_offset
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, dtype, device, offset) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, dtype, device, offset) if cfg.qk_norm else None
        # Normed in the rotary's pass (the weights are loaded into these same tensors later).
        self.qk_norm = (
            QKNorm(self.q_norm.weight, self.k_norm.weight, self.q_norm.eps, self.q_norm.round_normed)
            if cfg.qk_norm
            else None
        )
        self.attn = PagedAttention(
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.head_dim**-0.5 if cfg.attention_scale is None else cfg.attention_scale,
            cfg.sliding_windows[layer],
            rotary,
            cfg.attn_logit_softcap,
        )

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        return self.attend(positions, self.qkv_proj(x), meta)

    def attend(self, positions: torch.Tensor, qkv: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """The rest of ``forward`` after the q/k/v projection (which the caller may have fused with
        the norm before it)."""
        t = qkv.shape[0]
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        q = q.reshape(t, self.num_heads, self.head_dim)
        k = k.reshape(t, self.num_kv_heads, self.head_dim)
        v = v.reshape(t, self.num_kv_heads, self.head_dim)
        out = self.attn(positions, q, k, v, meta, self.qk_norm)  # (norms +) rotary + cache write + attention
        return self.o_proj(out.reshape(t, q_size))


class DecoderLayer(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        attention: DecoderAttention,
        dtype: torch.dtype,
        device: torch.device,
        tp: TPGroup,
        layer: int = 0,
    ) -> None:
        super().__init__()
        norm = [cfg.hidden_size, cfg.rms_norm_eps, dtype, device, cfg.norm_weight_offset]
        self.input_layernorm = RMSNorm(*norm)
        self.self_attn = attention
        self.post_attention_layernorm = RMSNorm(*norm)
        # Sandwich norms (Gemma): post_attention_layernorm norms the attention's output, the
        # pre-feedforward norm takes its place before the MLP and the post-feedforward one norms the
        # MLP's output.
        self.pre_feedforward_layernorm = RMSNorm(*norm) if cfg.sandwich_norms else None
        self.post_feedforward_layernorm = RMSNorm(*norm) if cfg.sandwich_norms else None
        self.mlp = decoder_mlp(cfg, layer, dtype, device, tp)
        # Both row-parallel outputs go only into the next fused add + RMSNorm (this layer's, the next
        # layer's, or the final norm), which rounds their fp32 sums itself; a sandwich norm does not.
        if not cfg.sandwich_norms:
            self.self_attn.o_proj.rounds_output = False
            if isinstance(self.mlp, GatedMLP):
                self.mlp.down_proj.rounds_output = False

    def forward(
        self, positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None, meta: AttentionMetadata
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # Each norm goes with the (column-parallel, so rank-local) projection after it: one kernel
        # for decode-sized batches on the Triton GEMV, norm then matmul otherwise.
        qkv_proj = self.self_attn.qkv_proj
        qkv, residual = self.input_layernorm.norm_matmul(x, residual, qkv_proj.weight, qkv_proj.bias)
        x = self.self_attn.attend(positions, qkv, meta)
        mlp_norm = self.post_attention_layernorm
        if self.pre_feedforward_layernorm is not None:
            x, mlp_norm = self.post_attention_layernorm(x), self.pre_feedforward_layernorm
        if isinstance(self.mlp, MoE):  # the router and the experts both read the normed input
            x, residual = mlp_norm.add_and_norm(x, residual)
            x = self.mlp(x)
        else:
            gate_up, residual = mlp_norm.norm_matmul(x, residual, self.mlp.gate_up_proj.weight)
            x = self.mlp.down(gate_up)
        if self.post_feedforward_layernorm is not None:
            x = self.post_feedforward_layernorm(x)
        return x, residual


def decoder_mlp(
    cfg: ModelConfig, layer: int, dtype: torch.dtype, device: torch.device, tp: TPGroup
) -> GatedMLP | MoE:
    """Layer ``layer``'s MLP: a mixture of experts where ``cfg.moe`` says so, else the dense SwiGLU
    (or GeGLU, as ``cfg.hidden_act`` says)."""
    if cfg.moe is not None and cfg.moe.moe_layers[layer]:
        if cfg.hidden_act != "silu":
            raise ValueError(f"mixture-of-experts layers run silu only, not {cfg.hidden_act!r}")
        return MoE(cfg.hidden_size, cfg.moe, dtype, device, tp)
    return GatedMLP(cfg.hidden_size, cfg.intermediate_size, dtype, device, tp, cfg.hidden_act)


# checkpoint module name -> (our fused module name, slice index)
_STACKED = {
    "q_proj": ("qkv_proj", 0),
    "q_a_proj": ("qkv_proj", 0),  # MLA: the query's low-rank projection...
    "kv_a_proj_with_mqa": ("qkv_proj", 1),  # ...stacked with the latent's (engine.layers.mla)
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
# Mixtral's names for the MoE block and an expert's projections.
_RENAMED_MODULES = {"block_sparse_moe": "mlp"}
_EXPERT_PROJECTION_ALIASES = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}


class CausalLM(nn.Module):
    def __init__(
        self,
        cfg: ModelConfig,
        dtype: torch.dtype,
        device: torch.device,
        max_position: int,
        tp: TPGroup = SINGLE,
    ) -> None:
        super().__init__()
        self.config = cfg
        self.tp = tp
        if cfg.mla is not None:
            attention, rotary = MLAAttention, mla_rotary(cfg, max_position, device)
        else:
            attention = DecoderAttention
            rotary = RotaryEmbedding(cfg.head_dim, max_position, cfg.rope_theta, cfg.rope_scaling, device)
        rotaries = [rotary] * cfg.num_layers
        if cfg.local_rope_theta is not None:  # the sliding-window layers' own RoPE base (Gemma-3)
            local = RotaryEmbedding(cfg.head_dim, max_position, cfg.local_rope_theta, None, device)
            rotaries = [rotary if w is None else local for w in cfg.sliding_windows]
        self.embed_tokens = Embedding(
            cfg.vocab_size, cfg.hidden_size, dtype, device, tp, cfg.embedding_multiplier
        )
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, attention(cfg, i, rotaries[i], dtype, device, tp), dtype, device, tp, i)
            for i in range(cfg.num_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype, device, cfg.norm_weight_offset)
        self.lm_head = LMHead(cfg.vocab_size, cfg.hidden_size, dtype, device, tp, cfg.final_logit_softcap)
        if cfg.tie_word_embeddings:
            self.lm_head.tie_to(self.embed_tokens)
        self.mtp = MTPWeights(cfg.num_layers, cfg.num_mtp_layers, dtype)

    def attention_layers(self) -> list[KVCacheLayer]:
        return [layer.self_attn.attn for layer in self.layers]

    def _layers(
        self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The last layer's output and residual stream, before the final norm."""
        x = self.embed_tokens(token_ids)
        residual = None
        for layer in self.layers:
            x, residual = layer(positions, x, residual, meta)
        return x, residual

    @torch.inference_mode()
    def forward(
        self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        x, _ = self.norm.add_and_norm(*self._layers(token_ids, positions, meta))
        return x

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)

    @torch.inference_mode()
    def decode_logits(
        self,
        token_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``compute_logits(forward(...))`` for a batch whose every row wants logits (a decode step),
        with the final norm folded into the LM head's GEMV where the batch is small enough;
        ``out``: an fp32 ``[rows, vocab]`` buffer the logits are written into (and returned)."""
        x, residual = self._layers(token_ids, positions, meta)
        return self.lm_head.forward_norm(x, residual, self.norm, out)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy HF-named tensors in; raises ValueError naming any unexpected or missing tensor."""
        params = dict(self.named_parameters(remove_duplicate=False))
        loaded: set[str] = set()
        for name, tensor in weights:
            if name.endswith(_IGNORED_SUFFIXES):
                continue
            target = name.removeprefix("model.")
            if self.mtp.keep(target, tensor):
                continue
            if target == "lm_head.weight" and self.config.tie_word_embeddings:
                continue  # some tied checkpoints still ship a copy
            parts = [_RENAMED_MODULES.get(p, p) for p in target.split(".")]
            if _is_expert_tensor(parts):
                loaded.add(self._load_expert(name, parts, tensor))
                continue
            shard = 0
            if len(parts) >= 2 and parts[-2] in _STACKED:
                parts[-2], shard = _STACKED[parts[-2]]
            target = ".".join(parts)
            if target not in params:
                raise ValueError(f"unexpected tensor {name!r} in checkpoint")
            module = self.get_submodule(target.rsplit(".", 1)[0])
            kind = parts[-1]
            with torch.no_grad():
                if isinstance(module, Linear | Embedding | LMHead | RMSNorm):  # this rank's slice, offset
                    try:
                        module.load(kind, tensor, shard)
                    except ValueError as exc:
                        raise ValueError(f"tensor {name!r}: {exc}") from exc
                else:
                    param = params[target]
                    if param.shape != tensor.shape:
                        raise ValueError(
                            f"tensor {name!r} has shape {tuple(tensor.shape)}, expected {tuple(param.shape)}"
                        )
                    param.data.copy_(tensor)
            loaded.add(f"{target}#{shard}")
        expected = set()
        for pname in params:
            module = self.get_submodule(pname.rsplit(".", 1)[0])
            if isinstance(module, FusedExperts):
                prefix = pname.rsplit(".", 1)[0]
                expected.update(f"{prefix}.{n}" for n in module.checkpoint_names())
                continue
            shards = len(module.output_sizes) if isinstance(module, Linear) else 1
            expected.update(f"{pname}#{i}" for i in range(shards))
        if self.config.tie_word_embeddings:
            expected.discard("lm_head.weight#0")
        missing = sorted(expected - loaded)
        if missing:
            raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {', '.join(missing[:3])}")

    def _load_expert(self, name: str, parts: list[str], tensor: torch.Tensor) -> str:
        """Load ``...experts.<e>.<projection>.weight`` into its stacked experts; returns the
        ``<experts module>.<e>.<projection>`` key that the missing-tensor check counts."""
        prefix, expert, projection = ".".join(parts[:-3]), int(parts[-3]), parts[-2]
        projection = _EXPERT_PROJECTION_ALIASES.get(projection, projection)
        try:
            module = self.get_submodule(prefix)
        except AttributeError:
            module = None
        if not isinstance(module, FusedExperts) or projection not in EXPERT_PROJECTIONS:
            raise ValueError(f"unexpected tensor {name!r} in checkpoint")
        try:
            module.load_projection(expert, projection, tensor)
        except ValueError as exc:
            raise ValueError(f"tensor {name!r}: {exc}") from exc
        return f"{prefix}.{expert}.{projection}"


def _is_expert_tensor(parts: list[str]) -> bool:
    """``...experts.<e>.<projection>.weight``: one routed expert's projection."""
    return len(parts) >= 4 and parts[-4] == "experts" and parts[-3].isdigit() and parts[-1] == "weight"
