import pytest

from engine.kv.events import KVEventLog


def test_events_are_sequenced_and_snapshot_tracks_cached_set():
    log = KVEventLog(capacity=10)
    log.stored([b"\x01" * 16, b"\x02" * 16])
    log.removed([b"\x01" * 16])
    events = log.events_since(0)
    assert [e["seq"] for e in events] == [1, 2]
    assert events[0] == {"seq": 1, "type": "stored", "hashes": ["01" * 16, "02" * 16], "tier": "device"}
    assert events[1]["type"] == "removed"
    assert log.events_since(1) == [events[1]]
    assert log.events_since(2) == []
    assert log.snapshot() == (2, ["02" * 16])
    log.cleared()
    assert log.snapshot() == (3, [])
    assert log.events_since(2)[0]["type"] == "cleared"


def test_consumer_behind_the_ring_must_resync():
    log = KVEventLog(capacity=2)
    for i in range(4):
        log.stored([bytes([i]) * 16])
    assert log.events_since(1) is None  # events 2.. are needed but 2 was dropped
    assert [e["seq"] for e in log.events_since(2)] == [3, 4]
    last, cached = log.snapshot()
    assert last == 4 and len(cached) == 4


def test_empty_updates_do_not_consume_sequence_numbers():
    log = KVEventLog()
    log.stored([])
    log.removed([])
    assert log.last_seq == 0
    with pytest.raises(ValueError):
        KVEventLog(capacity=0)


def test_events_carry_their_tier_and_the_snapshot_keeps_each_tiers_hashes():
    log = KVEventLog(capacity=10)
    log.stored([b"\x01" * 16])
    log.stored([b"\x01" * 16, b"\x02" * 16], tier="host")
    log.stored([b"\x03" * 16], tier="disk")
    log.removed([b"\x02" * 16], tier="host")
    events = log.events_since(0)
    assert [(e["type"], e["tier"]) for e in events] == [
        ("stored", "device"),
        ("stored", "host"),
        ("stored", "disk"),
        ("removed", "host"),
    ]
    assert events[3]["hashes"] == ["02" * 16]
    assert log.snapshot() == (4, ["01" * 16])  # the device pool's, as before tiers
    assert log.tier_snapshot() == (4, {"device": ["01" * 16], "host": ["01" * 16], "disk": ["03" * 16]})


def test_clearing_a_tier_leaves_the_others():
    log = KVEventLog()
    log.stored([b"\x01" * 16])
    log.stored([b"\x02" * 16], tier="host")
    log.cleared(tier="host")
    assert log.events_since(2) == [{"seq": 3, "type": "cleared", "hashes": [], "tier": "host"}]
    assert log.tier_snapshot() == (3, {"device": ["01" * 16], "host": []})
