"""A real ``chassis serve`` replica (tiny qwen3, CPU) for the load generator and run tests, and
Deployment/Replica rows that point at it."""

from __future__ import annotations

import pytest

from gateway.bench.cluster import cpu_replica

MODEL = "tiny"


@pytest.fixture(scope="session")
def engine_replica(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-replica")
    with cpu_replica(tiny_model_dir, MODEL, root, "--num-gpu-blocks", "512") as process:
        yield process


@pytest.fixture
def ready_replica_row(make_deployment):
    """A deployment whose one ready replica row is at ``url`` (a real engine, or nothing)."""
    from controlplane.serving.choices import ReplicaState as S
    from controlplane.serving.models import Replica

    def make(url: str, name: str = MODEL):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        deployment = make_deployment(name, replicas=1, vendor="cpu")
        replica = Replica.create_for(deployment, "test", "test")
        replica.transition(S.SCHEDULED, "test", "test", host=host)
        replica.transition(S.LAUNCHING, "test", "test", port=int(port))
        replica.transition(S.READY, "test", "test")
        return deployment

    return make
