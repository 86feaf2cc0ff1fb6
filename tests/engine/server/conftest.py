"""A real ``chassis serve`` process on a tiny qwen3 checkpoint (CPU, fp32), shared by the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from replica_process import API_KEY, Replica, start_replica, stop_replica


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    from engine.testing.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("ckpt") / "tiny-qwen3", arch="qwen3", seed=0)


@pytest.fixture(scope="session")
def replica(tiny_checkpoint, tmp_path_factory) -> Iterator[Replica]:
    running = start_replica(tiny_checkpoint, tmp_path_factory.mktemp("logs"), "--num-gpu-blocks", "512")
    yield running
    stop_replica(running)


@pytest.fixture(scope="session")
def openai_client(replica):
    import openai

    return openai.OpenAI(base_url=f"{replica.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def anthropic_client(replica):
    import anthropic

    return anthropic.Anthropic(base_url=replica.base_url, api_key=API_KEY, max_retries=0, timeout=60)
