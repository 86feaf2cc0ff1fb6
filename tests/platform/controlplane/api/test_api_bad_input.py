"""Out-of-range query parameters are 400s naming the parameter, never server errors."""

import pytest
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("param", ["limit", "offset"])
@pytest.mark.parametrize("value", [2**63, 2**64 + 1, 10**30])
def test_huge_limit_or_offset_is_400_naming_it(api, param, value):
    client = api("viewer")
    response = client.get(f"/api/v1/clusters/?{param}={value}")
    assert response.status_code == 400
    assert set(response.json()) == {param}
    assert client.get(f"/api/v1/clusters/?{param}={2**63 - 1}").status_code == 200
    assert client.get("/api/v1/clusters/?limit=1").status_code == 200


def test_every_delete_documents_its_409():
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    deletes = {path: ops["delete"] for path, ops in paths.items() if "delete" in ops}
    assert "/api/v1/clusters/{id}/" in deletes and "/api/v1/checkpoints/{id}/" in deletes
    for path, operation in deletes.items():
        assert {"204", "409"} <= set(operation["responses"]), path
