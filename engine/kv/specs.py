"""The KV cache layout of one layer, declared by the model: what sizing, allocation and the KV manager
read instead of assuming one shape for every layer. Pure Python: no torch.

A block holds ``block_size`` tokens of one layer; every layer shares the request's block table, so a
block id means the same token positions in each layer's cache.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


@dataclass(frozen=True, kw_only=True)
class KVCacheSpec:
    block_size: int  # tokens per block
    dtype: str  # a torch dtype's name, e.g. "bfloat16"

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"KV cache dtype {self.dtype!r} is not one of {', '.join(DTYPE_BYTES)}")

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def bytes_per_token(self) -> int:
        raise NotImplementedError

    @property
    def block_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    def cache_shape(self, num_blocks: int) -> tuple[int, ...]:
        """Shape of the layer's one cache tensor for ``num_blocks`` blocks."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(KVCacheSpec):
    """A key and a value per KV head for every token of the context."""

    num_kv_heads: int
    head_dim: int

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_kv_heads * self.head_dim * self.itemsize

    def cache_shape(self, num_blocks: int) -> tuple[int, ...]:
        # [K or V, blocks, block_size, kv_heads, head_dim]: each half is the paged layout the kernels read.
        return (2, num_blocks, self.block_size, self.num_kv_heads, self.head_dim)


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(FullAttentionSpec):
    """Attends to the last ``window`` tokens only. The cache still spans the whole context today
    (blocks that left every window are not freed early), so it sizes like full attention."""

    window: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.window <= 0:
            raise ValueError(f"sliding window must be positive, got {self.window}")


@dataclass(frozen=True, kw_only=True)
class MLASpec(KVCacheSpec):
    """Multi-head latent attention (DeepSeek-V2/V3): one compressed latent of ``kv_lora_rank`` values
    plus the shared rotary key part of ``rope_head_dim`` values per token, shared by all heads."""

    kv_lora_rank: int
    rope_head_dim: int

    @property
    def bytes_per_token(self) -> int:
        return (self.kv_lora_rank + self.rope_head_dim) * self.itemsize

    def cache_shape(self, num_blocks: int) -> tuple[int, ...]:
        return (num_blocks, self.block_size, self.kv_lora_rank + self.rope_head_dim)


def total_block_bytes(specs: list[KVCacheSpec]) -> int:
    """Bytes of one block id across every layer (what one more block costs)."""
    return sum(spec.block_bytes for spec in specs)


def total_bytes_per_token(specs: list[KVCacheSpec]) -> int:
    return sum(spec.bytes_per_token for spec in specs)


def shared_block_size(specs: list[KVCacheSpec]) -> int:
    """The one block size of all layers: they share each request's block table."""
    sizes = {spec.block_size for spec in specs}
    if len(sizes) != 1:
        raise ValueError(f"every layer must use one block size, got {sorted(sizes)}")
    return sizes.pop()
