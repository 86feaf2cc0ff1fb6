"""Keep the objects an engine starts with out of the garbage collector's full collections.

A full (generation-2) collection walks every object the collector tracks, and the process stands
still meanwhile. After an engine starts that is what everything imported made (torch, transformers:
about 370k objects) plus the KV pool's one ``Block`` per block (tens of thousands for Llama-3.1-8B
on an H200, about 200k for DeepSeek-V2-Lite's latent cache). On the H200 host such a collection
took 0.3-0.4 s in the middle of decoding, a stall of every running request: in the speculative
grid of session 21 it was up to 31 % of a run, and it decided which of two modes looked faster
(docs/performance.md). ``gc.freeze`` moves every object alive now into a permanent generation
that collections skip; objects made later (requests, their token lists) are collected as before.

For a process that holds one engine for the rest of its life (the engine-core process, a
benchmark) and freezes once that engine is built: a frozen object that later becomes cyclic garbage
is not collected until ``thaw_heap``, so a process that builds and drops engines one after another
(tests) must thaw before dropping one, or keep its memory.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def freeze_startup_heap() -> int:
    """Collect what is already garbage, then freeze the rest; returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def thaw_heap() -> None:
    """Frozen objects back under collection (the next full collection frees the cyclic garbage)."""
    gc.unfreeze()


@contextmanager
def startup_heap_frozen() -> Iterator[int]:
    """``freeze_startup_heap`` for the block's length; the frozen count is the value."""
    count = freeze_startup_heap()
    try:
        yield count
    finally:
        thaw_heap()
