from gateway.bench.decision import build_pool, run_decision_bench


def test_pool_for_the_benchmark_has_the_requested_size():
    pool, prompts = build_pool(replicas=4, blocks=500, prompt_tokens=256, block_size=16, seed=1)
    assert [pool.index.size(rid) for rid in pool.replicas] == [500] * 4
    decision = pool.decide(prompts[0])
    assert decision is not None and decision.total_blocks == 16


def test_decision_p99_under_a_millisecond_with_16_replicas_of_10000_blocks():
    report = run_decision_bench(replicas=16, blocks=10_000, prompt_tokens=2048, iterations=2000)
    # CPU time of the deciding thread; wall clock on a shared 2-core CI box measures its scheduler.
    assert report.decision_cpu_p99_us < 1000, report
    assert report.decision_cpu_p50_us < 500, report
