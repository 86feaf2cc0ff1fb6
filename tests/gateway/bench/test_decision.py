"""The routing decision's cost does not grow with the cache it searches.

The bare-time goal (p99 under a millisecond with 16 replicas of 10,000 blocks) is measured by
``chassis bench gateway-decision`` and recorded in docs/performance.md; a wall-clock or CPU-time
assertion here would measure the CI machine's load. What this test pins down instead is the reason
the goal holds: one table lookup per prompt block, whatever the number of replicas or cached blocks.
"""

import random

from gateway.bench.decision import build_pool, format_report, run_decision_bench


class CountingDict(dict):
    lookups = 0

    def get(self, key, default=None):
        CountingDict.lookups += 1
        return super().get(key, default)


def counted(pool) -> list[int]:
    pool.index._blocks = CountingDict(pool.index._blocks)
    pool.index._pending = CountingDict(pool.index._pending)
    return pool


def lookups_per_decision(pool, prompts) -> list[int]:
    counts = []
    for prompt in prompts:
        CountingDict.lookups = 0
        pool.decide(prompt)
        counts.append(CountingDict.lookups)
    return counts


def test_pool_for_the_benchmark_has_the_requested_size():
    pool, prompts = build_pool(replicas=4, blocks=500, prompt_tokens=256, block_size=16, seed=1)
    assert [pool.index.size(rid) for rid in pool.replicas] == [500] * 4
    decision = pool.decide(prompts[0])
    assert decision is not None and decision.total_blocks == 16


def test_a_decision_looks_each_prompt_block_up_once_in_each_table():
    pool, prompts = build_pool(replicas=16, blocks=2_000, prompt_tokens=512, block_size=16, seed=3)
    counts = lookups_per_decision(counted(pool), prompts)
    # matching reads the blocks and pending tables once per block at most; marking the chosen
    # replica's pending prefix touches each block once more
    assert max(counts) <= 3 * (512 // 16)
    assert min(counts) >= 2  # the first block is always looked up


def test_ten_thousand_more_cached_blocks_per_replica_cost_no_lookup():
    bare, prompts = build_pool(replicas=16, blocks=0, prompt_tokens=512, block_size=16, seed=3)
    full, same_prompts = build_pool(replicas=16, blocks=0, prompt_tokens=512, block_size=16, seed=3)
    rng = random.Random(9)
    for rid in full.replicas:
        full.index.store(rid, [rng.randbytes(16) for _ in range(10_000)])
    assert same_prompts == prompts
    assert sum(full.index.size(r) for r in full.replicas) >= 160_000
    assert lookups_per_decision(counted(full), prompts) == lookups_per_decision(counted(bare), prompts)


def test_the_benchmark_reports_wall_and_cpu_percentiles():
    report = run_decision_bench(replicas=4, blocks=500, prompt_tokens=256, iterations=200)
    assert report.iterations == 200 and report.replicas == 4
    assert 0 < report.decision_cpu_p50_us <= report.decision_cpu_p99_us
    assert 0 < report.decision_p50_us <= report.decision_p99_us <= report.decision_max_us
    assert "p99" in format_report(report)
