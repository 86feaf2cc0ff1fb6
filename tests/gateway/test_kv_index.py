import random
import time

import pytest

from engine.kv.block_hash import hash_chain
from gateway.kv_index import DEFAULT_TIER_WEIGHTS, KVIndex


def chain(tokens, block_size=4):
    return hash_chain(tokens, block_size)


def test_match_counts_leading_blocks_and_stops_at_first_miss():
    index = KVIndex(pending_ttl_s=0)
    full = chain(list(range(40)))  # 10 blocks
    index.store("a", full[:6])
    index.store("b", full[:2] + full[3:10])  # hole at block 2
    index.store("c", full[5:])  # no leading block
    match = index.match(full, ["a", "b", "c", "unknown"])
    assert match.total_blocks == 10
    assert match.matched == {"a": 6, "b": 2, "c": 0}
    assert match.best() == 6


def test_remove_clear_and_replace_keep_the_shared_table_consistent():
    index = KVIndex(pending_ttl_s=0)
    full = chain(list(range(32)))
    index.store("a", full)
    index.store("b", full[:4])
    index.remove("a", full[2:])
    assert index.match(full, ["a", "b"]).matched == {"a": 2, "b": 4}
    index.clear("b")
    assert index.match(full, ["a", "b"]).matched == {"a": 2, "b": 0}
    index.replace("a", full[:1])
    assert index.hashes("a") == {full[0]}
    index.remove_replica("a")
    assert index.match(full, ["a", "b"]).matched == {"b": 0}
    index.add_replica("z")  # reuses the freed slot; must not inherit a's blocks
    assert index.match(full, ["z"]).matched == {"z": 0}


def test_pending_prefix_counts_while_its_request_runs_and_a_ttl_after_it_ends():
    now = [100.0]
    index = KVIndex(pending_ttl_s=2.0, clock=lambda: now[0], pending_max_s=60.0)
    full = chain(list(range(16)))
    index.add_replica("a")
    index.add_replica("b")
    mark = index.mark_pending("b", full[:3])
    other = index.mark_pending("a", full[:1])
    assert index.match(full, ["a", "b"]).matched == {"a": 1, "b": 3}
    assert index.hashes("b") == set()  # pending is not confirmed
    now[0] += 30  # still queued or running on b: its prompt blocks are there
    assert index.match(full, ["a", "b"]).matched == {"a": 1, "b": 3}
    index.release_pending(mark)
    now[0] += 1.5
    assert index.match(full, ["a", "b"]).matched == {"a": 1, "b": 3}
    now[0] += 1.0  # the TTL after the end passed; events would have confirmed the blocks by now
    assert index.match(full, ["a", "b"]).matched == {"a": 1, "b": 0}
    index.release_pending(mark)  # twice, or an unknown mark: no effect
    index.release_pending(None)
    now[0] += 30  # a mark never released lapses after pending_max_s
    assert index.match(full, ["a", "b"]).matched == {"a": 0, "b": 0}
    assert other is not None


def test_removing_a_replica_drops_its_pending_marks():
    index = KVIndex(pending_ttl_s=2.0)
    full = chain(list(range(16)))
    index.release_pending(index.mark_pending("a", full[:2]))
    index.remove_replica("a")
    index.add_replica("z")  # reuses a's slot (its bit) and must not inherit a's pending prefix
    assert index.match(full, ["z"]).matched == {"z": 0}


def test_match_p99_under_a_millisecond_with_16_replicas_of_10000_blocks():
    rng = random.Random(0)
    index = KVIndex(pending_ttl_s=0)
    replicas = [f"r{i}" for i in range(16)]
    prompts = [[rng.randrange(50_000) for _ in range(2048)] for _ in range(20)]
    chains = [chain(p, 16) for p in prompts]  # 128 blocks each
    for i, rid in enumerate(replicas):
        index.store(rid, chains[i % len(chains)][: 64 + i])
        filler = [bytes(rng.getrandbits(8) for _ in range(16)) for _ in range(10_000 - index.size(rid))]
        index.store(rid, filler)
        assert index.size(rid) == 10_000
    times = []
    for i in range(2000):
        c = chains[i % len(chains)]
        start = time.thread_time()  # CPU time: other processes on a shared CI machine do not count
        index.match(c, replicas)
        times.append(time.thread_time() - start)
    times.sort()
    p99 = times[int(len(times) * 0.99)]
    assert p99 < 1e-3, f"match p99 {p99 * 1e6:.0f} us"


def test_equal_prefixes_rank_device_over_host_over_disk():
    index = KVIndex(pending_ttl_s=0)
    full = chain(list(range(16)))
    index.store("dev", full[:3])
    index.store("host", full[:3], tier="host")
    index.store("disk", full[:3], tier="disk")
    index.add_replica("none")
    match = index.match(full, ["dev", "host", "disk", "none"])
    assert match.matched == {"dev": 3, "host": 3, "disk": 3, "none": 0}
    assert match.scores == pytest.approx({"dev": 3.0, "host": 2.4, "disk": 1.5, "none": 0.0})


def test_a_longer_disk_prefix_against_a_shorter_device_one_goes_by_the_weights():
    index = KVIndex(pending_ttl_s=0)
    full = chain(list(range(40)))  # 10 blocks
    index.store("dev", full[:3])
    index.store("disk", full[:8], tier="disk")
    default = index.match(full, ["dev", "disk"])
    assert default.scores == pytest.approx({"dev": 3.0, "disk": 4.0})  # 8 x 0.5 beats 3 x 1.0
    cheap_disk = index.match(full, ["dev", "disk"], {**DEFAULT_TIER_WEIGHTS, "disk": 0.25})
    assert cheap_disk.scores == pytest.approx({"dev": 3.0, "disk": 2.0})


def test_a_chain_switching_tiers_scores_each_block_by_its_cheapest_tier():
    index = KVIndex(pending_ttl_s=0)
    full = chain(list(range(32)))  # 8 blocks
    index.store("a", full[:2])
    index.store("a", full[1:4], tier="host")  # block 1 on device and host: counts as device
    index.store("a", full[4:6], tier="shared")
    index.store("a", full[7:], tier="disk")  # past the gap at block 6: not a prefix
    index.store("b", full[:1], tier="host")
    index.store("b", full[1:5])
    match = index.match(full, ["a", "b"])
    assert match.matched == {"a": 6, "b": 5}
    assert match.scores == pytest.approx({"a": 2 * 1.0 + 2 * 0.8 + 2 * 0.5, "b": 0.8 + 4 * 1.0})
    index.remove("a", full[2:3], tier="host")
    assert index.match(full, ["a"]).matched == {"a": 2}


def test_pending_prefixes_count_as_on_the_device_over_a_lower_tier():
    index = KVIndex(pending_ttl_s=2.0)
    full = chain(list(range(16)))
    index.store("a", full[:2], tier="disk")
    index.mark_pending("a", full[:1])
    assert index.match(full, ["a"]).scores == pytest.approx({"a": 1.0 + 0.5})


def test_an_unknown_tier_is_refused_and_clearing_one_tier_keeps_the_others():
    index = KVIndex(pending_ttl_s=0)
    full = chain(list(range(16)))
    with pytest.raises(ValueError, match="unknown KV tier 'quantum'"):
        index.store("a", full, tier="quantum")
    index.store("a", full[:2])
    index.store("a", full, tier="host")
    index.clear("a", "host")
    assert index.match(full, ["a"]).matched == {"a": 2} and index.size("a", "host") == 0
    index.replace("a", full[:1], {"disk": full})
    assert index.hashes("a") == {full[0]} and index.hashes("a", "disk") == set(full)
    index.remove_replica("a")
    index.add_replica("z")  # reuses a's slot and must not inherit its disk blocks
    assert index.match(full, ["z"]).matched == {"z": 0}
