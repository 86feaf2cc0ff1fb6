"""Property-based fuzzing of the gateway's inference APIs in front of a live replica: whatever the
body, no server error (the gateway's own checks, its prompt rendering for cache-aware routing, and
what it relays), client errors in the API's error JSON, streams that end properly, and afterwards
a healthy gateway whose replica was never ejected."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given, settings

from tests.support.api_fuzz import ENDPOINTS, FUZZ, RAW_FUZZ, assert_healthy, check_answer, send
from tests.support.api_strategies import extra_headers, raw_bodies
from tests.support.gateway import start_gateway
from tests.support.replicas import API_KEY, MODEL, start_replica, stop_replica
from tests.support.servers import ServerThread

pytestmark = pytest.mark.slow

# The replica's own fuzz run (tests/engine/server/test_server_fuzz.py) goes deeper; this one checks
# what the gateway adds, in fewer examples.
GATEWAY_FUZZ = settings(FUZZ, max_examples=80)
GATEWAY_RAW_FUZZ = settings(RAW_FUZZ, max_examples=25)


@pytest.fixture(scope="module")
def replica(tiny_checkpoint, tmp_path_factory):
    running = start_replica(tiny_checkpoint, tmp_path_factory.mktemp("logs"), "--num-gpu-blocks", "256")
    yield running
    stop_replica(running)


@pytest.fixture(scope="module")
def gateway_url(replica, tiny_checkpoint):
    # Cache-aware routing renders every prompt in the gateway too, through the replica's converters.
    _, server = start_gateway(
        lambda app: ServerThread(app).start(),
        [{"url": replica.base_url, "id": "r0"}],
        policy="cache_aware",
        tokenizer=tiny_checkpoint,
        model=MODEL,
        replica_api_key=API_KEY,
    )
    yield server.url
    server.stop()


@pytest.fixture(scope="module")
def client():
    with httpx.Client(timeout=60) as http:
        yield http


def _healthy_afterwards(client, gateway_url, replica) -> None:
    assert_healthy(client, gateway_url, MODEL, {})
    assert client.get(f"{replica.base_url}/health").status_code == 200
    (described,) = client.get(f"{gateway_url}/gateway/state").json()["models"][0]["replicas"]
    assert described["routable"] and described["ejections"] == 0, described


@pytest.mark.parametrize("api", sorted(ENDPOINTS))
def test_no_request_gets_a_server_error(gateway_url, replica, client, api):
    endpoint = ENDPOINTS[api]

    @GATEWAY_FUZZ
    @given(body=endpoint.bodies(MODEL))
    def fuzz(body):
        check_answer(endpoint, body, *send(client, gateway_url + endpoint.path, body, {}))

    fuzz()
    _healthy_afterwards(client, gateway_url, replica)


@pytest.mark.parametrize("api", sorted(ENDPOINTS))
def test_no_malformed_body_or_header_gets_a_server_error(gateway_url, replica, client, api):
    endpoint = ENDPOINTS[api]

    @GATEWAY_RAW_FUZZ
    @given(body=raw_bodies(endpoint.bodies(MODEL)), headers=extra_headers)
    def fuzz(body, headers):
        check_answer(endpoint, body, *send(client, gateway_url + endpoint.path, body, headers))

    fuzz()
    _healthy_afterwards(client, gateway_url, replica)
