import gc
import weakref

from engine.core.gc_heap import freeze_startup_heap, startup_heap_frozen, thaw_heap


class Node:
    pass


def cyclic_node() -> tuple[weakref.ref, Node]:
    node = Node()
    node.itself = node
    return weakref.ref(node), node


def test_frozen_objects_escape_collections_until_thawed():
    ref, node = cyclic_node()
    try:
        assert freeze_startup_heap() > 0
        del node  # cyclic garbage now, but frozen
        gc.collect()
        assert ref() is not None
    finally:
        thaw_heap()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None


def test_objects_made_after_the_freeze_are_still_collected():
    with startup_heap_frozen() as frozen:
        assert frozen > 0 and gc.get_freeze_count() > 0
        ref, node = cyclic_node()
        del node
        gc.collect()
        assert ref() is None
    assert gc.get_freeze_count() == 0


class FullCollections:
    """Counts the collector's generation-2 runs inside the block."""

    def __init__(self) -> None:
        self.count = 0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            self.count += 1

    def __enter__(self) -> "FullCollections":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._callback)


def churn(rounds: int = 200_000) -> None:
    """Cyclic garbage, enough for the collector's own schedule to run full collections."""
    keep = []
    for i in range(rounds):
        _, node = cyclic_node()
        if i % 50 == 0:
            keep.append(node)  # some survive the young generations, as in-flight requests do


def test_the_freeze_defers_full_collections_until_idle(monkeypatch):
    import engine.core.gc_heap as gc_heap

    with startup_heap_frozen():
        assert gc_heap.full_collections_deferred() and gc.get_threshold()[2] == gc_heap._NEVER
        with FullCollections() as deferred:
            churn()
            assert gc.get_count()[2] > 0  # the middle generation ran, and promoted, many times
            assert deferred.count == 0
            assert gc_heap.collect_when_idle() is True
            assert deferred.count == 1
            assert gc_heap.collect_when_idle() is False  # nothing promoted since
    assert not gc_heap.full_collections_deferred() and gc.get_threshold()[2] != gc_heap._NEVER


def test_under_load_a_full_collection_runs_once_it_is_overdue(monkeypatch):
    import engine.core.gc_heap as gc_heap

    now = [1000.0]
    monkeypatch.setattr(gc_heap, "_clock", lambda: now[0])
    with startup_heap_frozen(), FullCollections() as full:
        assert gc_heap.collect_if_overdue() is False
        now[0] += gc_heap.FULL_COLLECTION_INTERVAL_S - 1
        assert gc_heap.collect_if_overdue() is False
        now[0] += 1
        assert gc_heap.collect_if_overdue() is True and full.count == 1
        assert gc_heap.collect_if_overdue() is False
    assert gc_heap.collect_if_overdue() is False and gc_heap.collect_when_idle() is False  # not deferred


def test_a_waiting_drive_loop_collects_before_it_waits(monkeypatch):
    from engine.core import drive_loop
    from engine.core.messages import Stop

    class IdleCore:
        def has_unfinished(self) -> bool:
            return False

    calls = []
    monkeypatch.setattr(drive_loop, "collect_when_idle", lambda: calls.append("idle"))
    waiting = drive_loop.CommandQueue(waits=True)
    waiting.put(Stop())
    assert drive_loop.run_turn(IdleCore(), waiting, lambda *a: None) is False
    assert calls == ["idle"]
    # An offline loop ends when idle: the caller's time, not a moment to collect in.
    assert drive_loop.run_turn(IdleCore(), drive_loop.CommandQueue(waits=False), lambda *a: None) is False
    assert calls == ["idle"]
