"""A real ``chassis serve`` process on the suite's tiny qwen3 checkpoint (CPU, fp32), shared by the
session, with a step gate a test may close to hold its engine mid-generation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.testing.step_gate import StepGate
from tests.support.replicas import API_KEY, Replica, start_replica, stop_replica


@pytest.fixture(scope="session")
def replica_gate(tmp_path_factory) -> StepGate:
    return StepGate(tmp_path_factory.mktemp("gate") / "step-gate")


@pytest.fixture
def gate(replica_gate) -> Iterator[StepGate]:
    """The session replica's step gate (engine/testing/step_gate.py), open again after the test."""
    yield replica_gate
    replica_gate.open()


@pytest.fixture(scope="session")
def replica(tiny_checkpoint, tmp_path_factory, replica_gate) -> Iterator[Replica]:
    running = start_replica(
        tiny_checkpoint, tmp_path_factory.mktemp("logs"), "--num-gpu-blocks", "512", env=replica_gate.env
    )
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
