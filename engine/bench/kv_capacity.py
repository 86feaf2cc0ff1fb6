"""How many tokens of context a KV cache pool holds: the model's own per-layer KV specs against an
uncompressed per-head K/V layout of the same attention (for multi-head latent attention: a key of
``qk_nope + qk_rope`` and a value of ``v_head_dim`` per head per layer, what the expanded
formulation would cache). Pure arithmetic on the config; no weights, no device."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from engine.checkpoint.model_config import ModelConfig
from engine.kv.specs import DTYPE_BYTES, total_bytes_per_token
from engine.models.registry import kv_cache_specs

GIB = 1 << 30


@dataclass(frozen=True)
class KVCapacity:
    architecture: str
    dtype: str
    tensor_parallel_size: int
    bytes_per_token: int  # the engine's cache layout, every layer, one rank
    per_head_bytes_per_token: int  # K and V per head, every layer, one rank

    @property
    def tokens_per_gib(self) -> int:
        return GIB // self.bytes_per_token

    @property
    def per_head_tokens_per_gib(self) -> int:
        return GIB // self.per_head_bytes_per_token

    @property
    def ratio(self) -> float:
        return self.per_head_bytes_per_token / self.bytes_per_token

    def to_dict(self) -> dict:
        return asdict(self) | {
            "tokens_per_gib": self.tokens_per_gib,
            "per_head_tokens_per_gib": self.per_head_tokens_per_gib,
            "ratio": self.ratio,
        }


def kv_capacity(cfg: ModelConfig, dtype: str = "bfloat16", tp: int = 1) -> KVCapacity:
    heads = cfg.num_heads // tp
    if cfg.mla is not None:
        per_head = heads * (cfg.mla.qk_head_dim + cfg.mla.v_head_dim)
    else:
        per_head = 2 * max(1, cfg.num_kv_heads // tp) * cfg.head_dim
    return KVCapacity(
        architecture=cfg.architecture,
        dtype=dtype,
        tensor_parallel_size=tp,
        bytes_per_token=total_bytes_per_token(kv_cache_specs(cfg, 1, dtype, tp)),
        per_head_bytes_per_token=cfg.num_layers * per_head * DTYPE_BYTES[dtype],
    )


def format_kv_capacity(name: str, capacity: KVCapacity) -> str:
    return "\n".join(
        [
            f"{name} ({capacity.architecture}), KV cache in {capacity.dtype}, "
            f"tensor_parallel_size={capacity.tensor_parallel_size}:",
            f"  engine layout:        {capacity.bytes_per_token:>9,} bytes/token  "
            f"{capacity.tokens_per_gib:>9,} tokens/GiB",
            f"  per-head K/V layout:  {capacity.per_head_bytes_per_token:>9,} bytes/token  "
            f"{capacity.per_head_tokens_per_gib:>9,} tokens/GiB",
            f"  ratio:                {capacity.ratio:.2f}x the tokens in the same memory",
        ]
    )
