"""Copies between the device pool's per-layer caches and one contiguous byte buffer per block.

A block's buffer is every layer's pages for that block id, layer after layer (keys then values
for attention, the latent for MLA), in the cache dtype's raw bytes: onloading it into any free
block id restores the KV bit for bit.

Onloading is staged: ``write_block`` queues one whole-block host-to-device copy into a device
staging buffer (asynchronous from the host tier's pinned buffers, so the next block's lookup
overlaps the transfer), and each full staging buffer is scattered into the layers' pages on the
device, one indexed copy per cache part. ``finish`` scatters the rest and returns without waiting
on CUDA: the copies run on the stream the model's steps run on, so the step that reads the blocks
waits for them on the device while the host prepares and launches it. The host buffers stay
referenced until their copies are done (a tier may drop an entry meanwhile). Per-layer copies from
the host instead (64 small synchronous copies per Llama-8B block) reach a few percent of the link's
bandwidth. On the CPU the pages are written directly: a staging buffer there is only one more copy
(and fresh pages).
"""

from __future__ import annotations

import torch

from engine.kv.specs import FullAttentionSpec, KVCacheSpec

STAGING_BYTES = 256 << 20  # device memory the staging buffer may take while an onload runs


class BlockIO:
    def __init__(
        self, caches: list[torch.Tensor], specs: list[KVCacheSpec], staged: bool | None = None
    ) -> None:
        """``staged``: onload through a device staging buffer (default: on an accelerator)."""
        # One view per cache part, each indexed by block id on its first dimension.
        self._parts: list[torch.Tensor] = []
        for cache, spec in zip(caches, specs, strict=True):
            self._parts += [cache[0], cache[1]] if isinstance(spec, FullAttentionSpec) else [cache]
        # The same memory as bytes, one row per block id (a view: a part that is not contiguous
        # per block fails here rather than onloading into a copy).
        self._rows = [p.view(torch.uint8).view(p.shape[0], -1) for p in self._parts]
        self._sizes = [r.shape[1] for r in self._rows]
        self.block_bytes = sum(self._sizes)
        self.device = self._parts[0].device
        self.staged = self.device.type != "cpu" if staged is None else staged
        self._slots = max(1, STAGING_BYTES // self.block_bytes)
        self._staging: torch.Tensor | None = None
        self._queued: list[int] = []  # block ids, one per filled staging row
        self._sources: list[torch.Tensor] = []  # host buffers of this onload's copies
        self._started: torch.cuda.Event | None = None  # CUDA: this onload's first copy
        self._in_flight: list[CudaCopies] = []  # earlier onloads, holding their host buffers

    def read_block(self, block_id: int) -> bytearray:
        pages = torch.cat([r[block_id] for r in self._rows])
        return bytearray(pages.cpu().numpy().tobytes())

    def write_block(self, block_id: int, kv) -> bool:
        """Queue ``kv`` for ``block_id``; False (and nothing queued) for a buffer that is not one
        block of this layout. The pages hold it once ``finish`` returns."""
        kv = memoryview(kv).cast("B")
        if kv.nbytes != self.block_bytes:
            return False
        if kv.readonly:
            kv = memoryview(bytearray(kv))
        source = torch.frombuffer(kv, dtype=torch.uint8)
        if self._started is None and self.device.type == "cuda":
            self._started = self._mark()
        if not self.staged:
            offset = 0
            for rows, size in zip(self._rows, self._sizes, strict=True):
                rows[block_id].copy_(source[offset : offset + size])
                offset += size
            return True
        if self._staging is None:
            self._staging = torch.empty(
                (self._slots, self.block_bytes), dtype=torch.uint8, device=self.device
            )
        self._staging[len(self._queued)].copy_(source, non_blocking=True)
        self._queued.append(block_id)
        self._sources.append(source)
        if len(self._queued) == self._slots:
            self._scatter()
        return True

    def finish(self) -> CudaCopies | None:
        """Every block written so far in its pages for work queued after this on the device; on
        CUDA the copies may still run (the returned handle says when they are done), elsewhere
        they are done (None)."""
        if self._queued:
            self._scatter()
        started, self._started = self._started, None
        self._staging = None  # back to the allocator's cache (stream-ordered) between onloads
        self._in_flight = [c for c in self._in_flight if c.seconds() is None]
        if started is not None:
            copies = CudaCopies(started, self._mark(), self._sources)
            self._sources = []
            self._in_flight.append(copies)
            return copies
        if self.device.type != "cpu":
            torch.accelerator.synchronize(self.device)
        self._sources.clear()
        return None

    def _mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def _scatter(self) -> None:
        n = len(self._queued)
        # Pinned on CUDA: a copy from pageable memory would first wait for the queued copies.
        ids = torch.tensor(self._queued, dtype=torch.long, pin_memory=self.device.type == "cuda")
        ids = ids.to(self.device, non_blocking=True)
        offset = 0
        for rows, size in zip(self._rows, self._sizes, strict=True):
            rows.index_copy_(0, ids, self._staging[:n, offset : offset + size])
            offset += size
        self._queued.clear()


class CudaCopies:
    """An onload's copies on the CUDA stream: their host buffers are held until they are done."""

    def __init__(self, started: torch.cuda.Event, ended: torch.cuda.Event, sources: list) -> None:
        self._started, self._ended, self._sources = started, ended, sources
        self._seconds: float | None = None

    def seconds(self) -> float | None:
        if self._seconds is None and self._ended.query():
            self._seconds = self._started.elapsed_time(self._ended) / 1e3
            self._sources = []
        return self._seconds
