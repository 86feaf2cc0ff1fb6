"""A real ``chassis serve`` replica (tiny qwen3, CPU) for the dashboards tests, shared by the session."""

from __future__ import annotations

import pytest

from gateway.bench.cluster import cpu_replica

MODEL = "tiny-dash"


@pytest.fixture(scope="session")
def replica(tmp_path_factory):
    from engine.testing.tiny_model import make_tiny_model

    root = tmp_path_factory.mktemp("dash-replica")
    model_dir = make_tiny_model(root / "tiny", arch="qwen3", seed=0)
    # Speculation and a host KV tier on, so the speculative-decoding and KV-tier series the engine
    # dashboard queries are exported.
    args = ("--num-gpu-blocks", "256", "--speculative-method", "ngram", "--kv-host-cache-mib", "16")
    with cpu_replica(model_dir, MODEL, root, *args) as process:
        yield process
