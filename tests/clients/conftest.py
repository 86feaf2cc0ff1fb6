"""Real client packages against a live ``chassis serve`` replica of the tiny model and an in-process
gateway in front of it. ``endpoint`` runs a test once against each."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.support.gateway import start_gateway
from tests.support.replicas import API_KEY, MODEL, Replica, start_replica, stop_replica
from tests.support.servers import ServerThread
from tests.support.waiting import wait_until


@dataclass(frozen=True)
class Endpoint:
    name: str
    base_url: str  # without /v1: the anthropic SDK adds it, the OpenAI-style clients get base_url + "/v1"

    @property
    def v1(self) -> str:
        return f"{self.base_url}/v1"


@pytest.fixture(scope="session")
def client_replica(tiny_checkpoint, tmp_path_factory) -> Iterator[Replica]:
    running = start_replica(
        tiny_checkpoint, tmp_path_factory.mktemp("client-logs"), "--num-gpu-blocks", "512"
    )
    yield running
    stop_replica(running)


@pytest.fixture(scope="session")
def client_gateway(client_replica) -> Iterator[str]:
    _, server = start_gateway(
        lambda app: ServerThread(app).start(),
        [{"url": client_replica.base_url, "id": "r0"}],
        model=MODEL,
        replica_api_key=API_KEY,
    )
    wait_until(
        lambda: httpx.get(f"{server.url}/health").status_code == 200, "the gateway to route to the replica"
    )
    yield server.url
    server.stop()


@pytest.fixture(scope="session", params=["replica", "gateway"])
def endpoint(request) -> Endpoint:
    if request.param == "replica":
        return Endpoint("replica", request.getfixturevalue("client_replica").base_url)
    return Endpoint("gateway", request.getfixturevalue("client_gateway"))
