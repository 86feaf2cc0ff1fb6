"""schemathesis over the admin API's own OpenAPI schema, against a live server with an admin token:
no server error, every status code, content type and response body as the schema documents it."""

import json

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

# django_db (no transaction) only makes pytest-django create the test database; the server writes
# through its own connections, and control_plane empties the database once at the end.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.django_db]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def control_plane(django_db_setup, django_db_blocker):
    """(url, admin token) of one live server for every operation, on the test database, emptied
    once at the end: the live_server fixture would flush the database after each of the ~60 tests."""
    from io import StringIO

    from django.core.management import call_command
    from pytest_django.live_server_helper import LiveServer

    with django_db_blocker.unblock():
        out = StringIO()
        call_command("create_api_token", "fuzz-admin", "--role", "admin", stdout=out)
        server = LiveServer("localhost")
        try:
            yield server.url, out.getvalue().strip()
        finally:
            server.stop()
            call_command("flush", interactive=False, verbosity=0)


@pytest.fixture(scope="module")
def http():
    with requests.Session() as session:
        yield session


def _served_schema() -> dict:
    """What /api/schema/ serves, built in-process: schemathesis's fixture-loaded (lazy) schemas do not
    run on pytest 9.2, and a module-level schema is what parametrizes one test per operation."""
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


schema = schemathesis.openapi.from_dict(_served_schema())
# The coverage phase sends some 250 boundary cases per operation whatever max_examples says; the
# fuzzing phase alone, at 5 examples for each of the ~60 operations (derandomized, so the same
# valid and invalid inputs every run), keeps the whole module under 30 s on a loaded 2-core machine.
schema.config.phases.coverage.enabled = False
# Revoking tokens is left to test_api_tokens.py: a fuzzed id can be the fuzzer's own token, and every
# call after that would be a 401 (then a 429 for the failed logins) instead of a test of anything.
schema = schema.exclude(method="POST", path="/api/v1/api-tokens/{id}/revoke/")


@schema.parametrize()
@settings(
    max_examples=5,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_admin_api_conforms_to_its_schema(case, control_plane, http):
    url, token = control_plane
    # Sent with plain requests: schemathesis's own call counts pooled connections through urllib3
    # internals that urllib3-future (pinned for locust) does not have.
    kwargs = case.as_transport_kwargs(base_url=url, headers={"Authorization": f"Bearer {token}"})
    case.validate_response(http.request(**kwargs, timeout=30), checks=CHECKS)


def test_the_fuzzed_schema_is_the_served_one(control_plane, http):
    url, _ = control_plane
    assert http.get(f"{url}/api/schema/?format=json", timeout=30).json() == _served_schema()
