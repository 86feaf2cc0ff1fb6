"""The core's KV changes replayed in the front end keep their tier and their sequence numbers."""

from __future__ import annotations

from engine.core.kv_forwarding import ForwardingKVEventLog, replay
from engine.kv.events import KVEventLog


def test_replayed_changes_keep_their_tier():
    core = ForwardingKVEventLog(16)
    core.stored([b"\x01" * 16])
    core.stored([b"\x01" * 16], tier="host")
    core.removed([b"\x01" * 16], tier="host")
    core.cleared(tier="disk")
    mirror = KVEventLog(16)
    replay(mirror, core.take())
    assert mirror.events_since(0) == core.events_since(0)
    assert mirror.tier_snapshot() == core.tier_snapshot()
    assert [e["tier"] for e in mirror.events_since(0)] == ["device", "host", "host", "disk"]
