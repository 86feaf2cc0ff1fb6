"""A real ``chassis serve`` replica (tiny qwen3, CPU) for the load generator and run tests, and
Deployment/Replica rows that point at it."""

from __future__ import annotations

import time

import pytest

from engine.gateway.bench.cluster import Process, _chassis, free_port

MODEL = "tiny"


@pytest.fixture(scope="session")
def engine_replica(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-replica")
    port = free_port()
    process = Process(
        "replica",
        _chassis(
            "serve", str(tiny_model_dir), "--port", str(port), "--device", "cpu", "--dtype", "float32",
            "--served-model-name", MODEL, "--num-gpu-blocks", "512", "--log-level", "warning",
        ),
        port,
        root / "serve.log",
    )  # fmt: skip
    process.start()
    try:
        process.wait_ready("/health", time.monotonic() + 120)
        yield process
    finally:
        process.stop()


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
