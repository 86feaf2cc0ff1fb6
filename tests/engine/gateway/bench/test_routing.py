"""Acceptance 1, on real processes: cache_aware against round_robin over 4 tiny-model replicas."""

import pytest

from engine.gateway.bench.routing import run_policy
from engine.gateway.bench.workload import WorkloadShape

pytestmark = pytest.mark.slow


def test_cache_aware_doubles_the_hit_rate_of_round_robin_without_a_hot_replica(tmp_path):
    from engine.tiny_model import make_tiny_model

    model_dir = make_tiny_model(tmp_path / "tiny", arch="qwen3", seed=0)
    reports = {
        policy: run_policy(
            policy,
            model_dir,
            tmp_path,
            replicas=4,
            shape=WorkloadShape(requests=160),
            seed=0,
            concurrency=8,
            max_tokens=4,
            load_margin=4.0,
            serve_args=["--max-num-seqs", "16"],
            log=lambda message: None,
        )
        for policy in ("round_robin", "cache_aware")
    }
    rr, ca = reports["round_robin"], reports["cache_aware"]
    assert rr.failed == 0 and ca.failed == 0
    assert ca.prefix_cache_hit_rate >= 2 * rr.prefix_cache_hit_rate, (rr, ca)
    # Not asserted: "lower TTFT p50". On the tiny model a cache hit saves only ~20-40 ms of prefill,
    # and on a shared 2-core machine that is within run-to-run noise (cache_aware was faster in 2 of
    # 4 measured runs). See docs/performance.md, "Gateway routing".
    assert max(ca.replica_share.values()) <= 0.40, ca.replica_share
    assert len(ca.replica_share) == 4
