"""A real ``chassis serve`` replica (tiny qwen3, CPU) for the Locust tests."""

from __future__ import annotations

import pytest

from gateway.bench.cluster import cpu_replica
from tests.loadtests.locust_run import API_KEY, MODEL


@pytest.fixture(scope="session")
def replica(tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("load-replica")
    with cpu_replica(
        tiny_checkpoint, MODEL, root, "--api-key", API_KEY, "--num-gpu-blocks", "512"
    ) as process:
        yield process
