"""Copies between the device pool's per-layer caches and one contiguous byte buffer per block.

A block's buffer is every layer's pages for that block id, layer after layer (keys then values
for attention, the latent for MLA), in the cache dtype's raw bytes: onloading it into any free
block id restores the KV bit for bit. The copies are synchronous here; on a GPU they would run on
a side stream into pinned buffers, with an event per block that the step reading the block waits
on (the seam is ``read_block``/``write_block``: callers only see whole, finished copies).
"""

from __future__ import annotations

import torch

from engine.kv.specs import FullAttentionSpec, KVCacheSpec


class BlockIO:
    def __init__(self, caches: list[torch.Tensor], specs: list[KVCacheSpec]) -> None:
        # One view per cache part, each indexed by block id on its first dimension.
        self._parts: list[torch.Tensor] = []
        for cache, spec in zip(caches, specs, strict=True):
            self._parts += [cache[0], cache[1]] if isinstance(spec, FullAttentionSpec) else [cache]
        self._sizes = [p[0].numel() * p.element_size() for p in self._parts]
        self.block_bytes = sum(self._sizes)

    def read_block(self, block_id: int) -> bytearray:
        pages = torch.cat([p[block_id].contiguous().view(-1).view(torch.uint8) for p in self._parts])
        return bytearray(pages.cpu().numpy().tobytes())

    def write_block(self, block_id: int, kv) -> bool:
        """False (and nothing written) for a buffer that is not one block of this layout."""
        kv = memoryview(kv).cast("B")
        if kv.nbytes != self.block_bytes:
            return False
        if kv.readonly:
            kv = memoryview(bytearray(kv))
        data = torch.frombuffer(kv, dtype=torch.uint8)
        offset = 0
        for part, size in zip(self._parts, self._sizes, strict=True):
            page = part[block_id]
            src = data[offset : offset + size].view(page.dtype).view(page.shape)
            page.copy_(src, non_blocking=False)
            offset += size
        return True
