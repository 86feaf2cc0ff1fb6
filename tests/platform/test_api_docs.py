"""The browsable API docs work offline: Swagger UI's assets come from our static files, not a CDN."""

import re

import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


def test_api_docs_page_uses_local_swagger_assets(client):
    user = get_user_model().objects.create_superuser("docs-admin", "a@example.com", "pw-docs-123")
    client.force_login(user)
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html
    scripts = re.findall(r'src="([^"]+swagger-ui[^"]*\.js)"', html)
    assert scripts, html[:2000]
    for src in scripts:
        asset = client.get(src)
        assert asset.status_code == 200, src
