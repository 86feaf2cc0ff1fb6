"""A real ``chassis serve`` replica (tiny qwen3, CPU) for the Locust tests."""

from __future__ import annotations

import pytest
from locust_run import API_KEY, MODEL

from gateway.bench.cluster import cpu_replica


@pytest.fixture(scope="session")
def replica(tmp_path_factory):
    from engine.testing.tiny_model import make_tiny_model

    root = tmp_path_factory.mktemp("load-replica")
    model_dir = make_tiny_model(root / "tiny", arch="qwen3", seed=0)
    with cpu_replica(model_dir, MODEL, root, "--api-key", API_KEY, "--num-gpu-blocks", "512") as process:
        yield process
