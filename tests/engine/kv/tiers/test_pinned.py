"""Pinned host buffers of exact page-rounded sizes: aligned, reused once unreferenced, thread-safe.
Ordinary memory stands in for page-locked memory here (``pin=False``); the bookkeeping is the same."""

from __future__ import annotations

import gc
import threading

from engine.kv.tiers.pinned import PAGE, PinnedBuffers


def address(buf) -> int:
    return buf.ctypes.data


def test_buffers_have_the_size_asked_for_start_on_a_page_and_do_not_overlap():
    buffers = PinnedBuffers(chunk_bytes=16 * PAGE, pin=False)
    got = [buffers(n) for n in (1, PAGE, PAGE + 1, 3 * PAGE - 5)]
    assert [len(b) for b in got] == [1, PAGE, PAGE + 1, 3 * PAGE - 5]
    assert all(address(b) % PAGE == 0 for b in got)
    spans = sorted((address(b), address(b) + len(b)) for b in got)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False))
    assert buffers.bytes_reserved == 16 * PAGE  # one chunk, a power of two as torch would round it


def test_a_buffer_nobody_references_is_handed_out_again_and_a_held_one_is_not():
    buffers = PinnedBuffers(chunk_bytes=4 * PAGE, pin=False)
    held = buffers(PAGE)
    view = memoryview(buffers(PAGE))  # a reader (a copy in flight) still holds this one
    dropped = buffers(PAGE)
    dropped_at = address(dropped)
    del dropped
    gc.collect()
    again = buffers(PAGE)
    assert address(again) == dropped_at
    assert address(buffers(PAGE)) not in (address(held), dropped_at)
    assert view.nbytes == PAGE


def test_a_request_larger_than_a_chunk_gets_its_own_chunk():
    buffers = PinnedBuffers(chunk_bytes=2 * PAGE, pin=False)
    big = buffers(5 * PAGE)
    big[:] = 7
    assert len(big) == 5 * PAGE and address(big) % PAGE == 0


def test_threads_get_disjoint_buffers():
    buffers = PinnedBuffers(chunk_bytes=64 * PAGE, pin=False)
    got: list = []
    lock = threading.Lock()

    def take():
        mine = [buffers(PAGE) for _ in range(20)]
        with lock:
            got.extend(mine)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({address(b) for b in got}) == 80
