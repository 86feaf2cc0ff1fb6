"""API throttles: past its rate a client gets 429 with a JSON error and Retry-After. Rates come from
settings (the defaults are far above what the suite sends); these tests lower them."""

import pytest
from django.core.cache import cache

pytestmark = pytest.mark.django_db


@pytest.fixture
def rates(settings):
    cache.clear()  # throttle histories live in the default cache

    def set_rates(**rates):
        framework = dict(settings.REST_FRAMEWORK)
        framework["DEFAULT_THROTTLE_RATES"] = {**framework["DEFAULT_THROTTLE_RATES"], **rates}
        settings.REST_FRAMEWORK = framework

    yield set_rates
    cache.clear()


def assert_throttled(response):
    assert response.status_code == 429
    assert "throttled" in response.json()["detail"]
    assert 0 < int(response["Retry-After"]) <= 60


def test_a_user_past_its_rate_gets_429(api, rates):
    rates(user="3/min")
    viewer = api("viewer")
    for _ in range(3):
        assert viewer.get("/api/v1/nodes/").status_code == 200
    assert_throttled(viewer.get("/api/v1/nodes/"))
    assert api("operator").get("/api/v1/nodes/").status_code == 200  # counted per user


def test_anonymous_clients_past_their_rate_get_429(api, rates):
    rates(anon="2/min")
    anonymous = api(None)
    for _ in range(2):
        assert anonymous.get("/api/schema/?format=json").status_code == 200
    assert_throttled(anonymous.get("/api/schema/?format=json"))


def test_unknown_tokens_are_throttled_per_address_before_any_lookup(api, rates, tokens):
    from rest_framework.test import APIClient

    rates(token_failures="3/min")
    guesser = APIClient()
    for attempt in range(3):
        guesser.credentials(HTTP_AUTHORIZATION=f"Bearer not-a-token-{attempt}")
        assert guesser.get("/api/v1/nodes/").status_code == 401
    guesser.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['viewer']}")
    assert_throttled(guesser.get("/api/v1/nodes/"))  # even the right token, from that address
    elsewhere = APIClient(REMOTE_ADDR="10.1.2.3")
    elsewhere.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['viewer']}")
    assert elsewhere.get("/api/v1/nodes/").status_code == 200


def test_a_made_up_forwarded_for_does_not_reset_the_count(api, rates):
    rates(anon="2/min")
    anonymous = api(None)
    for attempt in range(2):
        assert anonymous.get("/api/schema/?format=json", HTTP_X_FORWARDED_FOR=f"10.0.0.{attempt}").status_code == 200
    assert_throttled(anonymous.get("/api/schema/?format=json", HTTP_X_FORWARDED_FOR="10.0.0.9"))
