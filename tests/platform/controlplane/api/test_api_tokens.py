"""API tokens: issued with a name, the key shown once, last use recorded, revoked tokens refused."""

import pytest
from controlplane.api.models import ApiToken, AuditEntry
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_issue_use_and_revoke(api):
    created = api("viewer").post("/api/v1/api-tokens/", {"name": "my script"}, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    key = body["key"]
    assert body["username"] == "viewer-user" and body["prefix"] == key[:8] and body["last_used"] is None
    assert ApiToken.objects.get(pk=body["id"]).digest != key  # only a hash is stored

    assert bearer(key).get("/api/v1/deployments/").status_code == 200
    listed = bearer(key).get("/api/v1/api-tokens/").json()["results"]
    mine = next(token for token in listed if token["id"] == body["id"])
    assert mine["last_used"] is not None and mine["key"] is None

    revoked = bearer(key).post(f"/api/v1/api-tokens/{body['id']}/revoke/")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert bearer(key).get("/api/v1/deployments/").status_code == 401
    assert [e.action for e in AuditEntry.objects.filter(object_type="api.apitoken")] == ["revoke", "create"]


def test_a_user_sees_only_their_tokens_and_an_admin_all(api):
    api("viewer").post("/api/v1/api-tokens/", {"name": "viewer's"}, format="json")
    viewer_sees = {t["username"] for t in api("viewer").get("/api/v1/api-tokens/").json()["results"]}
    admin_sees = {t["username"] for t in api("admin").get("/api/v1/api-tokens/").json()["results"]}
    assert viewer_sees == {"viewer-user"}
    assert {"viewer-user", "operator-user", "admin-user"} <= admin_sees
    admins = ApiToken.objects.filter(user__username="admin-user").get()
    assert api("viewer").post(f"/api/v1/api-tokens/{admins.pk}/revoke/").status_code == 404
    assert api("viewer").post("/api/v1/api-tokens/", {}, format="json").status_code == 400


def test_create_api_token_command_revokes_the_users_older_tokens(tokens):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("create_api_token", "viewer-user", "--role", "viewer", stdout=out)
    assert bearer(tokens["viewer"]).get("/api/v1/deployments/").status_code == 401
    assert bearer(out.getvalue().strip()).get("/api/v1/deployments/").status_code == 200


def test_an_admin_deleting_themselves_is_audited_under_their_name(api):
    from django.contrib.auth import get_user_model

    me = get_user_model().objects.get(username="admin-user")
    assert api("admin").delete(f"/api/v1/users/{me.pk}/").status_code == 204
    entry = AuditEntry.objects.get(action="delete", object_type="auth.user")
    assert entry.username == "admin-user" and entry.user is None and entry.object_id == str(me.pk)
