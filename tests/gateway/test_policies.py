from collections import Counter

from engine.kv.block_hash import hash_chain
from gateway.config import BreakerConfig, PolicyConfig, ReplicaSpec
from gateway.kv_index import KVIndex
from gateway.policies import CacheAware, LeastLoad, RoundRobin, RoutingRequest, Session
from gateway.replica import Health, Replica, ReplicaLoad


def replicas(n):
    return [
        Replica.create(ReplicaSpec.from_url(f"http://127.0.0.1:{9000 + i}", f"r{i}"), BreakerConfig())
        for i in range(n)
    ]


def test_round_robin_cycles_through_candidates():
    policy = RoundRobin(PolicyConfig("round_robin"))
    pool = replicas(3)
    picks = [policy.choose(pool, RoutingRequest()).replica.replica_id for _ in range(6)]
    assert picks == ["r0", "r1", "r2", "r0", "r1", "r2"]


def test_least_load_uses_in_flight_foreign_queue_and_kv_usage():
    policy = LeastLoad(PolicyConfig("least_load", kv_usage_weight=4.0))
    a, b, c = replicas(3)
    a.in_flight = 2
    a.observe_scrape(ReplicaLoad(running=2))  # only our own two: no foreign load
    b.observe_scrape(ReplicaLoad(waiting=1))  # one request from elsewhere -> load 1
    c.observe_scrape(ReplicaLoad(kv_usage=0.5))  # load 2.0 with weight 4
    assert [a.load(4.0), b.load(4.0), c.load(4.0)] == [2.0, 1.0, 2.0]
    assert policy.choose([a, b, c], RoutingRequest()).replica is b
    b.observe_scrape(ReplicaLoad(running=1, waiting=2))
    assert policy.choose([a, b, c], RoutingRequest()).replica is a


def test_cache_aware_prefers_longest_prefix_until_the_load_margin_is_crossed():
    index = KVIndex(pending_ttl_s=0)
    a, b, c = replicas(3)
    for r in (a, b, c):
        index.add_replica(r.replica_id)
    chain = hash_chain(list(range(64)), 16)
    index.store("r1", chain[:3])
    index.store("r2", chain[:1])
    policy = CacheAware(PolicyConfig("cache_aware", load_margin=2), index)
    request = RoutingRequest(chain_factory=lambda: chain)
    decision = policy.choose([a, b, c], request)
    assert (decision.replica, decision.matched_blocks, decision.total_blocks) == (b, 3, 4)
    b.in_flight = 2  # 2 more than the least loaded: within the margin
    assert policy.choose([a, b, c], request).replica is b
    b.in_flight = 3  # beyond the margin: load wins, and among the light ones the longer prefix
    decision = policy.choose([a, b, c], request)
    assert (decision.replica, decision.matched_blocks, decision.reason) == (c, 1, "load")
    c.in_flight = 1  # still within the margin of the least loaded (a, 0)
    assert policy.choose([a, b, c], request).replica is c
    c.in_flight = 3
    assert policy.choose([a, b, c], request).replica is a
    c.in_flight = 0
    # No prefix anywhere: least loaded.
    a.in_flight = 1
    other = hash_chain(list(range(100, 164)), 16)
    assert policy.choose([a, b, c], RoutingRequest(chain_factory=lambda: other)).replica is c


def test_cache_aware_spreads_a_hot_prefix_over_replicas_that_all_hold_it():
    index = KVIndex(pending_ttl_s=0)
    pool = replicas(4)
    chain = hash_chain(list(range(64)), 16)
    for r in pool[:2]:
        index.store(r.replica_id, chain)
    policy = CacheAware(PolicyConfig("cache_aware", load_margin=2), index)
    pool[0].in_flight = 1
    assert policy.choose(pool, RoutingRequest(chain_factory=lambda: chain)).replica is pool[1]


def test_session_is_sticky_and_moves_only_when_its_replica_is_gone():
    policy = Session(PolicyConfig("session"))
    pool = replicas(4)
    owners = {f"s{i}": policy.choose(pool, RoutingRequest(session_key=f"s{i}")).replica for i in range(200)}
    assert all(policy.choose(pool, RoutingRequest(session_key=k)).replica is r for k, r in owners.items())
    assert min(Counter(r.replica_id for r in owners.values()).values()) > 25  # spread, not piled up
    gone = pool[0]
    gone.health = Health.DOWN
    alive = [r for r in pool if r.routable]
    for key, owner in owners.items():
        now = policy.choose(alive, RoutingRequest(session_key=key)).replica
        assert now is not gone
        if owner is not gone:
            assert now is owner
    pool[1].in_flight = 5
    assert policy.choose(pool, RoutingRequest()).replica is not pool[1]  # no key: least load


def test_session_key_with_a_lone_surrogate_still_picks_a_sticky_replica():
    policy = Session(PolicyConfig("session"))
    pool = replicas(3)
    owner = policy.choose(pool, RoutingRequest(session_key="\ud800")).replica
    assert policy.choose(pool, RoutingRequest(session_key="\ud800")).replica is owner


def test_cache_aware_picks_the_replica_holding_the_prefix_in_its_host_tier_over_one_with_nothing():
    index = KVIndex(pending_ttl_s=0)
    a, b = replicas(2)
    chain = hash_chain(list(range(64)), 16)
    index.add_replica(a.replica_id)
    index.store(b.replica_id, chain[:3], tier="host")
    policy = CacheAware(PolicyConfig("cache_aware", load_margin=2), index)
    b.in_flight = 1  # busier, within the margin
    decision = policy.choose([a, b], RoutingRequest(chain_factory=lambda: chain))
    assert (decision.replica, decision.matched_blocks, decision.reason) == (b, 3, "prefix")


def test_cache_aware_weighs_a_longer_disk_prefix_against_a_shorter_device_one():
    index = KVIndex(pending_ttl_s=0)
    a, b = replicas(2)
    chain = hash_chain(list(range(160)), 16)  # 10 blocks
    index.store(a.replica_id, chain[:3])
    index.store(b.replica_id, chain[:8], tier="disk")
    request = RoutingRequest(chain_factory=lambda: chain)
    assert CacheAware(PolicyConfig("cache_aware"), index).choose([a, b], request).replica is b
    cheap_disk = PolicyConfig("cache_aware", tier_weights=(("disk", 0.25),))
    assert CacheAware(cheap_disk, index).choose([a, b], request).replica is a
