"""Page-locked host buffers of the size asked for, carved from large pinned chunks.

Host-to-device copies from page-locked memory are direct DMA and can be queued without the host
waiting. torch's pinned allocator rounds every request up to a power of two, so a KV block record
(2 MiB of Llama-8B KV plus its header) would pin 4 MiB: here each request takes its size rounded up
to a page, from a free list of that size or a fresh slice of the current chunk. A buffer goes back
to its free list once nothing references it (the tier dropped it and the copies reading it are
done), so memory is reused, never returned to the system (as torch's own cache does). Page-aligned,
so a file can be read into a buffer with O_DIRECT.
"""

from __future__ import annotations

import mmap
import threading
import weakref

import numpy as np
import torch

PAGE = mmap.PAGESIZE
CHUNK_BYTES = 256 << 20


class PinnedBuffers:
    def __init__(self, chunk_bytes: int = CHUNK_BYTES, pin: bool = True) -> None:
        """``chunk_bytes``: rounded up to a power of two."""
        """``pin`` False: the same bookkeeping over ordinary memory (tests on machines without CUDA)."""
        self.chunk_bytes = chunk_bytes
        self.pin = pin
        self._free: dict[int, list[np.ndarray]] = {}
        self._chunk: np.ndarray | None = None
        self._used = 0
        self.bytes_reserved = 0  # pinned memory taken from the system so far
        self._lock = threading.Lock()

    def __call__(self, nbytes: int) -> np.ndarray:
        """A writable, page-aligned buffer of ``nbytes`` bytes (thread-safe)."""
        size = max(PAGE, -(-nbytes // PAGE) * PAGE)
        with self._lock:
            free = self._free.get(size)
            slot = free.pop() if free else self._carve(size)
        view = slot[:nbytes]
        weakref.finalize(view, self._release, size, slot)
        return view

    def _carve(self, size: int) -> np.ndarray:
        if self._chunk is None or self._used + size > len(self._chunk):
            # A power of two, which torch's allocator would round up to anyway. Page-locked
            # memory starts on a page; ordinary memory may not, and the slack is left unused.
            nbytes = 1 << (max(self.chunk_bytes, size + PAGE) - 1).bit_length()
            raw = torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.pin).numpy()
            skew = -raw.ctypes.data % PAGE
            self._chunk = raw[skew : skew + (nbytes - skew) // PAGE * PAGE]
            self._used = 0
            self.bytes_reserved += nbytes
        slot = self._chunk[self._used : self._used + size]
        self._used += size
        return slot

    def _release(self, size: int, slot: np.ndarray) -> None:
        with self._lock:
            self._free.setdefault(size, []).append(slot)
