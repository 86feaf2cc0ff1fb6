"""The KV follower against a real HTTP upstream serving the engine's own KVEventLog."""

import asyncio

import httpx

from engine.kv.block_hash import hash_chain
from gateway.kv_follower import KVFollower
from gateway.kv_index import KVIndex
from tests.support.ports import free_port
from tests.support.upstream import Upstream


def blocks(start, n):
    return hash_chain(list(range(start, start + 4 * n)), 4)


def as_set(upstream):
    return {bytes.fromhex(h) for h in upstream.kv.snapshot()[1]}


def run(coro):
    return asyncio.run(coro)


def test_follows_events_and_resyncs_after_a_gap_or_a_restart(serve):
    port = free_port()
    upstream = Upstream("r0", log_capacity=8)
    server = serve(upstream.app, port=port)
    index = KVIndex(pending_ttl_s=0)
    sizes = []

    async def scenario():
        nonlocal upstream, server
        async with httpx.AsyncClient(timeout=2) as client:
            follower = KVFollower("r0", server.url, index, client, on_block_size=sizes.append)
            upstream.kv.stored(blocks(0, 5))
            await follower.poll_once()  # first contact: snapshot
            assert follower.resyncs == 1 and index.hashes("r0") == as_set(upstream)

            upstream.kv.stored(blocks(100, 3))
            upstream.kv.removed(blocks(0, 5)[3:])
            assert await follower.poll_once() == 2
            assert index.hashes("r0") == as_set(upstream) and follower.resyncs == 1

            for i in range(12):  # more events than the replica's log keeps: 410, then resync
                upstream.kv.stored(blocks(1000 + 10 * i, 1))
            upstream.kv.removed(blocks(100, 3)[:1])
            await follower.poll_once()
            assert follower.seq is None  # 410 seen
            await follower.poll_once()
            assert follower.resyncs == 2 and index.hashes("r0") == as_set(upstream)

            upstream.kv.cleared()
            upstream.kv.stored(blocks(5000, 2))
            await follower.poll_once()
            assert index.hashes("r0") == as_set(upstream)

            server.stop()  # replica dies: an error, and the next contact is a snapshot
            try:
                await follower.poll_once()
            except httpx.HTTPError:
                pass
            assert follower.seq is None
            upstream = Upstream("r0", log_capacity=8)
            upstream.kv.stored(blocks(7000, 1))
            server = serve(upstream.app, port=port)
            await follower.poll_once()
            assert follower.resyncs == 3 and index.hashes("r0") == as_set(upstream)

    run(scenario())
    assert sizes and set(sizes) == {4}


def test_restart_detected_from_sequence_going_backwards(serve):
    port = free_port()
    first = Upstream("r0")
    server = serve(first.app, port=port)
    index = KVIndex(pending_ttl_s=0)

    async def scenario():
        async with httpx.AsyncClient(timeout=2) as client:
            follower = KVFollower("r0", server.url, index, client)
            for i in range(5):
                first.kv.stored(blocks(10 * i, 1))
            await follower.poll_once()
            assert follower.seq == 5
            # Swap the app's state under the same server: a fresh replica with a shorter log.
            fresh = Upstream("r0")
            fresh.kv.stored(blocks(900, 2))
            first.kv = fresh.kv
            await follower.poll_once()
            assert follower.seq is None
            await follower.poll_once()
            assert index.hashes("r0") == as_set(fresh)

    run(scenario())


def test_follows_tier_events_and_tier_snapshots(serve):
    upstream = Upstream("r0")
    server = serve(upstream.app, port=free_port())
    index = KVIndex(pending_ttl_s=0)
    hashes = blocks(0, 4)

    async def scenario():
        async with httpx.AsyncClient(timeout=2) as client:
            follower = KVFollower("r0", server.url, index, client)
            upstream.kv.stored(hashes[:2])
            upstream.kv.stored(hashes[2:], tier="host")
            await follower.poll_once()  # snapshot: device hashes plus "tiers"
            assert index.hashes("r0") == set(hashes[:2]) and index.hashes("r0", "host") == set(hashes[2:])

            upstream.kv.removed(hashes[:1])  # device evicts block 0 into host, then disk
            upstream.kv.stored(hashes[:1], tier="host")
            upstream.kv.stored(hashes[:1], tier="disk")
            upstream.kv.removed(hashes[3:], tier="host")
            upstream.kv.stored(hashes[3:], tier="quantum")  # a tier this gateway does not know
            assert await follower.poll_once() == 5 and follower.resyncs == 1
            assert index.hashes("r0") == {hashes[1]}
            assert index.hashes("r0", "host") == {hashes[0], hashes[2]}
            assert index.hashes("r0", "disk") == {hashes[0]}

            upstream.kv.cleared(tier="host")
            await follower.poll_once()
            assert index.size("r0", "host") == 0 and index.size("r0", "disk") == 1 and index.size("r0") == 1

    run(scenario())


def test_an_event_without_a_tier_is_the_devices(serve):
    """Replicas from before the tiers send no "tier"."""
    upstream = Upstream("r0")
    server = serve(upstream.app, port=free_port())
    index = KVIndex(pending_ttl_s=0)

    async def scenario():
        async with httpx.AsyncClient(timeout=2) as client:
            follower = KVFollower("r0", server.url, index, client)
            await follower.poll_once()
            upstream.kv.stored(blocks(0, 2), tier="host")
            upstream.kv._events[-1].pop("tier")  # as an older replica logged it
            assert await follower.poll_once() == 1
            assert index.hashes("r0") == set(blocks(0, 2)) and index.size("r0", "host") == 0

    run(scenario())
