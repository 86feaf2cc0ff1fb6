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

After the freeze, what the collector tracks is small, so its rule (a full collection once the
objects promoted since the last one exceed a quarter of the tracked ones) fired every few tens of
steps at batch 256, 7-20 ms each, inside the runs of the speculative grid (session 21). So the
freeze also defers full collections: the young generations are collected as before, and full
collections happen when the engine is idle (``collect_when_idle``: its drive loop is about to wait
for a request) or, under load that never lets it idle, once every ``FULL_COLLECTION_INTERVAL_S``
between two steps (``collect_if_overdue``). Cyclic garbage that outlives the young generations
waits that long; everything else is freed by reference counting as it always is.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager

FULL_COLLECTION_INTERVAL_S = 30.0
_NEVER = 1 << 30  # a generation-2 threshold the young collections never reach


class _Deferral:
    thresholds: tuple[int, int, int] | None = None  # the collector's own while deferral is on
    last_full = 0.0


_deferral = _Deferral()
_clock = time.monotonic  # tests replace it


def freeze_startup_heap() -> int:
    """Collect what is already garbage, freeze the rest and defer full collections
    (``defer_full_collections``); returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    defer_full_collections()
    return gc.get_freeze_count()


def thaw_heap() -> None:
    """Frozen objects back under collection (the next full collection frees the cyclic garbage), and
    the collector's own schedule back."""
    restore_full_collections()
    gc.unfreeze()


def defer_full_collections() -> None:
    """No automatic full collection from now on: only ``collect_when_idle`` and ``collect_if_overdue``."""
    if _deferral.thresholds is None:
        _deferral.thresholds = gc.get_threshold()
        young, middle, _ = _deferral.thresholds
        gc.set_threshold(young, middle, _NEVER)
    _deferral.last_full = _clock()


def restore_full_collections() -> None:
    if _deferral.thresholds is not None:
        gc.set_threshold(*_deferral.thresholds)
        _deferral.thresholds = None


def full_collections_deferred() -> bool:
    return _deferral.thresholds is not None


def collect_when_idle() -> bool:
    """With full collections deferred: one now, if the young generations promoted anything since the
    last; True if it ran. Called where the engine is about to wait for work."""
    if _deferral.thresholds is None or gc.get_count()[2] == 0:
        return False
    _collect_full()
    return True


def collect_if_overdue() -> bool:
    """With full collections deferred: one now if the last was ``FULL_COLLECTION_INTERVAL_S`` ago or
    more; True if it ran. Called between steps."""
    if _deferral.thresholds is None or _clock() - _deferral.last_full < FULL_COLLECTION_INTERVAL_S:
        return False
    _collect_full()
    return True


def _collect_full() -> None:
    gc.collect(2)
    _deferral.last_full = _clock()


@contextmanager
def startup_heap_frozen() -> Iterator[int]:
    """``freeze_startup_heap`` for the block's length; the frozen count is the value."""
    count = freeze_startup_heap()
    try:
        yield count
    finally:
        thaw_heap()
