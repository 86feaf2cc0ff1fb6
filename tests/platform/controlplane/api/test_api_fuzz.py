"""schemathesis over the admin API's own OpenAPI schema, against a live server with an admin token:
no server error, every status code and response body as the schema documents it."""

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

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(280)]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def admin_headers(tokens):
    return {"Authorization": f"Bearer {tokens['admin']}"}


def _served_schema() -> dict:
    """What /api/schema/ serves, built in-process: schemathesis's fixture-loaded (lazy) schemas do not
    run on pytest 9.2, and a module-level schema is what parametrizes one test per operation."""
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


@pytest.fixture(scope="module")
def http():
    with requests.Session() as session:
        yield session


schema = schemathesis.openapi.from_dict(_served_schema())
# The coverage phase sends some 250 boundary cases per operation whatever max_examples says; the
# fuzzing phase (valid and invalid inputs) alone keeps the run within a couple of minutes.
schema.config.phases.coverage.enabled = False


@schema.parametrize()
@settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_admin_api_conforms_to_its_schema(case, live_server, admin_headers, http):
    # Sent with plain requests: schemathesis's own call counts pooled connections through urllib3
    # internals that urllib3-future (pinned for locust) does not have.
    response = http.request(**case.as_transport_kwargs(base_url=live_server.url, headers=admin_headers), timeout=30)
    case.validate_response(response, checks=CHECKS)
