"""A real ``chassis serve`` replica (tiny qwen3, CPU) for the Locust tests."""

from __future__ import annotations

import time

import pytest
from locust_run import API_KEY, MODEL

from engine.gateway.bench.cluster import Process, _chassis, free_port


@pytest.fixture(scope="session")
def replica(tmp_path_factory):
    from engine.tiny_model import make_tiny_model

    root = tmp_path_factory.mktemp("load-replica")
    model_dir = make_tiny_model(root / "tiny", arch="qwen3", seed=0)
    port = free_port()
    process = Process(
        "replica",
        _chassis(
            "serve", str(model_dir), "--port", str(port), "--device", "cpu", "--dtype", "float32",
            "--served-model-name", MODEL, "--api-key", API_KEY, "--num-gpu-blocks", "512",
            "--log-level", "warning",
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
