"""Out-of-range query parameters are 400s naming the parameter, never server errors."""

import pytest

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
