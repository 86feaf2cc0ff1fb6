"""Property-based fuzzing of a live replica's inference APIs: whatever the body, no server error,
client errors in the API's error JSON, streams that end properly, and a healthy replica afterwards."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given

from tests.support.api_fuzz import ENDPOINTS, FUZZ, RAW_FUZZ, assert_healthy, check_answer, send
from tests.support.api_strategies import extra_headers, raw_bodies
from tests.support.replicas import API_KEY, MODEL

pytestmark = pytest.mark.slow

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def client():
    with httpx.Client(timeout=60) as http:
        yield http


@pytest.mark.parametrize("api", sorted(ENDPOINTS))
def test_no_request_gets_a_server_error(replica, client, api):
    endpoint = ENDPOINTS[api]

    @FUZZ
    @given(body=endpoint.bodies(MODEL))
    def fuzz(body):
        check_answer(endpoint, body, *send(client, replica.base_url + endpoint.path, body, AUTH))

    fuzz()
    assert_healthy(client, replica.base_url, MODEL, AUTH)


@pytest.mark.parametrize("api", sorted(ENDPOINTS))
def test_no_malformed_body_or_header_gets_a_server_error(replica, client, api):
    endpoint = ENDPOINTS[api]

    @RAW_FUZZ
    @given(body=raw_bodies(endpoint.bodies(MODEL)), headers=extra_headers)
    def fuzz(body, headers):
        check_answer(
            endpoint, body, *send(client, replica.base_url + endpoint.path, body, {**headers, **AUTH})
        )

    fuzz()
    assert_healthy(client, replica.base_url, MODEL, AUTH)
