"""Writes through the API: validation errors name the field, actions change state, audit records who."""

import pytest
from controlplane.api.models import AuditEntry
from controlplane.serving.models import Deployment

pytestmark = pytest.mark.django_db


def test_bad_payloads_get_400_naming_the_field(api, ready_checkpoint):
    client = api("operator")
    response = client.post(
        "/api/v1/deployments/",
        {"name": "x", "checkpoint": ready_checkpoint.pk, "replicas": -1},
        format="json",
    )
    assert response.status_code == 400 and set(response.json()) == {"replicas"}
    response = client.post("/api/v1/deployments/", {"name": "x", "checkpoint": 999999}, format="json")
    assert response.status_code == 400 and "checkpoint" in response.json()
    response = client.post(
        "/api/v1/deployments/",
        {"name": "x", "checkpoint": ready_checkpoint.pk, "engine_options": [1]},
        format="json",
    )
    assert response.status_code == 400 and "engine_options" in response.json()
    response = client.post("/api/v1/checkpoints/", {"name": "c", "path": "relative/dir"}, format="json")
    assert response.status_code == 400 and response.json() == {
        "path": ["must be an absolute path on the nodes"]
    }
    response = client.post("/api/v1/deployments/", data="{not json", content_type="application/json")
    assert response.status_code == 400 and "detail" in response.json()


def test_deployment_needs_a_ready_checkpoint(api, db):
    from controlplane.checkpoints.models import Checkpoint

    registered = Checkpoint.objects.create(name="raw", path="/models/raw")
    response = api("operator").post(
        "/api/v1/deployments/", {"name": "x", "checkpoint": registered.pk}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["checkpoint"] == ["checkpoint raw@main is registered; it must be ready"]


def test_create_scale_drain_and_audit(api, ready_checkpoint, django_capture_on_commit_callbacks):
    client = api("operator")
    with django_capture_on_commit_callbacks() as callbacks:
        created = client.post(
            "/api/v1/deployments/",
            {
                "name": "chat",
                "checkpoint": ready_checkpoint.pk,
                "replicas": 2,
                "engine_options": {"max_num_seqs": 8},
            },
            format="json",
        )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["served_model_name"] == "chat" and body["routing_policy"] == "cache-aware"
    assert len(callbacks) == 1  # a reconcile is published once the row is committed
    pk = body["id"]
    response = client.post(f"/api/v1/deployments/{pk}/scale/", {"replicas": "many"}, format="json")
    assert response.status_code == 400 and "replicas" in response.json()
    assert (
        client.post(f"/api/v1/deployments/{pk}/scale/", {"replicas": 1}, format="json").json()["replicas"]
        == 1
    )
    response = client.post(f"/api/v1/deployments/{pk}/drain/", {"replica": 12345}, format="json")
    assert response.status_code == 400 and response.json() == {
        "replica": ["not a replica of this deployment"]
    }
    assert client.post(f"/api/v1/deployments/{pk}/drain/", {}, format="json").json()["replicas"] == 0
    actions = list(AuditEntry.objects.filter(object_id=str(pk)).values_list("username", "action"))
    assert actions == [("operator-user", "drain"), ("operator-user", "scale"), ("operator-user", "create")]
    assert AuditEntry.objects.get(action="scale").changes == {"replicas": [2, 1]}
    assert Deployment.objects.get(pk=pk).replicas == 0


def test_cannot_delete_deployment_with_running_replicas(api, make_deployment, make_node):
    from controlplane.serving.reconciler import reconcile_deployment

    make_node("n1")
    deployment = make_deployment(replicas=1, vendor="nvidia")
    reconcile_deployment(deployment.pk, "t")
    response = api("operator").delete(f"/api/v1/deployments/{deployment.pk}/")
    assert response.status_code == 400 and "replicas" in response.json()


def test_replica_exposes_what_the_gateway_needs(api, make_deployment, make_node):
    from controlplane.serving.models import Replica

    node = make_node("n1")
    replica = Replica.create_for(make_deployment(served_model_name="tiny-chat", replicas=1), "t", "t")
    replica.schedule(node, [], "t")
    replica.start_launch(8107, "/tmp/l", "t")
    replica.mark_ready("ok", "t")
    (row,) = api("viewer").get("/api/v1/replicas/?state=ready").json()["results"]
    assert row["url"] == "http://127.0.0.1:8107"
    assert (row["state"], row["deployment"], row["served_model_name"]) == (
        "ready",
        replica.deployment_id,
        "tiny-chat",
    )
    assert row["routing_policy"] == "cache-aware"
    (dep,) = api("viewer").get("/api/v1/deployments/").json()["results"]
    assert dep["routing_policy"] == "cache-aware" and dep["ready_replicas"] == 1


def test_admin_manages_users_and_roles(api):
    client = api("admin")
    response = client.post(
        "/api/v1/users/", {"username": "bob", "role": "root", "password": "long-enough-pw"}, format="json"
    )
    assert response.status_code == 400 and "role" in response.json()
    response = client.post(
        "/api/v1/users/", {"username": "bob", "role": "operator", "password": "long-enough-pw"}, format="json"
    )
    assert (
        response.status_code == 201
        and response.json()["role"] == "operator"
        and "password" not in response.json()
    )
    assert AuditEntry.objects.get(action="create", object_repr="bob").changes == {
        "username": "bob",
        "role": "operator",
    }


def test_create_api_token_command_rejects_unknown_role():
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError):
        call_command("create_api_token", "x", "--role", "superhero")
