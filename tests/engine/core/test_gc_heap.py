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
