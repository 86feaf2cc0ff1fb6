"""The operator UI's list pages through Django's test client: role gating, search, sort, paging,
CSV export, tokens, cordon, replica logs through the agent, and deletes with a 409."""

import csv
import io

import pytest

pytestmark = pytest.mark.django_db


def csv_rows(response):
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_admin_pages_need_admin_and_every_page_renders(login, make_deployment, make_node):
    make_node("n1", count=2)
    make_deployment()
    viewer = login("viewer")
    for url in ("/users/", "/audit/"):
        assert viewer.get(url).status_code == 403
    for url in ("/nodes/", "/replicas/", "/events/", "/tokens/", "/checkpoints/", "/deployments/"):
        assert viewer.get(url).status_code == 200, url
    viewer.logout()
    admin = login("admin")
    for url in ("/users/", "/audit/", "/nodes/", "/replicas/", "/events/", "/tokens/"):
        assert admin.get(url).status_code == 200, url


def test_search_sort_page_and_csv(login, make_node):
    for index in range(30):
        make_node(f"node-{index:02d}", count=1)
    client = login("viewer")
    page = client.get("/nodes/?sort=-name").content.decode()
    assert page.index("node-29") < page.index("node-28") and "page 1 of 2" in page
    assert "node-00" in client.get("/nodes/?sort=-name&page=2").content.decode()
    found = client.get("/nodes/?q=node-1").content.decode()
    assert "node-15" in found and "node-25" not in found
    rows = csv_rows(client.get("/nodes/?q=node-1&sort=name&export=csv"))
    assert rows[0][:2] == ["Name", "State"] and [row[0] for row in rows[1:]] == [
        f"node-{i}" for i in range(10, 20)
    ]
    every = csv_rows(client.get("/nodes/?sort=-name&export=csv"))
    assert len(every) == 31 and every[1][0] == "node-29"  # every page, not the first 25, in the sort asked
    assert client.get("/nodes/?state=nonsense").status_code == 200  # a bad filter is a form error


def test_tokens_from_the_ui_and_revoke(login):
    from controlplane.api.models import ApiToken
    from rest_framework.test import APIClient

    client = login("viewer")
    response = client.post("/tokens/", {"name": "laptop"})
    key = response.context["new_key"]
    assert key and key in response.content.decode()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.get("/api/v1/nodes/").status_code == 200
    assert "never" not in client.get("/tokens/").content.decode().split("laptop")[1][:400]  # last used
    token = ApiToken.objects.get(name="laptop")
    assert client.post(f"/tokens/{token.pk}/revoke/").status_code == 302
    assert api.get("/api/v1/nodes/").status_code == 401
    assert client.post("/tokens/", {"name": ""}).status_code == 400


def test_users_created_in_the_ui_and_from_createsuperuser_log_in(login, client, monkeypatch):
    from django.core.management import call_command

    admin = login("admin")
    assert (
        admin.post(
            "/users/", {"username": "uma", "password": "uma-password-9", "role": "operator"}
        ).status_code
        == 302
    )
    assert admin.post("/users/", {"username": "x", "password": "short", "role": "viewer"}).status_code == 400
    admin.logout()
    assert client.post("/login/", {"username": "uma", "password": "uma-password-9"}).status_code == 302
    assert client.get("/deployments/").status_code == 200
    client.logout()
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "root-password-9")
    call_command("createsuperuser", "--noinput", "--username", "root", "--email", "root@example.com")
    assert client.post("/login/", {"username": "root", "password": "root-password-9"}).status_code == 302
    assert client.get("/users/").status_code == 200  # a superuser is an admin


def test_cordoned_node_gets_no_new_replica(login, make_node, make_deployment):
    from controlplane.fleet.models import Node
    from controlplane.serving.models import Replica
    from controlplane.serving.reconciler import reconcile_deployment

    first, second = make_node("a-node", count=1), make_node("b-node", count=1)
    admin = login("admin")
    assert admin.post(f"/nodes/{first.pk}/cordon/").status_code == 302
    assert Node.objects.get(pk=first.pk).state == "cordoned"
    assert 'data-state="cordoned"' in admin.get("/nodes/").content.decode()
    deployment = make_deployment(replicas=1, vendor="nvidia")
    reconcile_deployment(deployment.pk, "t")
    assert Replica.objects.get(deployment=deployment).node_id == second.pk
    assert admin.post(f"/nodes/{first.pk}/uncordon/").status_code == 302
    assert Node.objects.get(pk=first.pk).state == "up"


def test_replica_page_reads_the_log_through_the_agent(login, make_deployment, make_node, monkeypatch):
    from controlplane.serving import agent_logs
    from controlplane.serving.models import Replica
    from django.contrib.auth import get_user_model

    node = make_node("n1", count=1)
    replica = Replica.create_for(make_deployment(), "t", "t")
    client = login("viewer")
    assert "no log yet" in client.get(f"/replicas/{replica.pk}/log/").content.decode()
    Replica.objects.filter(pk=replica.pk).update(node=node, log_path="/var/log/x.log")
    published = []

    class Answer:
        def get(self, timeout):
            return "line one\nline two"

        def forget(self):
            pass

    class Signature:
        def __init__(self, name, args):
            self.name, self.args = name, args

        def apply_async(self, queue):
            published.append((self.name, self.args, queue))
            return Answer()

    monkeypatch.setattr(agent_logs.current_app, "signature", Signature)
    page = client.get(f"/replicas/{replica.pk}/log/").content.decode()
    assert "line two" in page and published == [("serving.replica_log_tail", [replica.pk, 80], "node.n1")]
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(get_user_model().objects.get(username="viewer-ui"))
    assert api.get(f"/api/v1/replicas/{replica.pk}/log/").json() == {
        "replica": replica.pk,
        "node": "n1",
        "log": "line one\nline two",
        "missing": None,
    }
    from celery.exceptions import TimeoutError as CeleryTimeout

    def silent(self, timeout):
        raise CeleryTimeout()

    monkeypatch.setattr(Answer, "get", silent)
    assert (
        "the agent of node n1 did not answer within 8 s"
        in client.get(f"/replicas/{replica.pk}/log/").content.decode()
    )
    header = csv_rows(client.get("/replicas/?export=csv"))[0]
    assert header[:3] == ["Replica", "Deployment", "State"]
    detail = client.get(f"/replicas/{replica.pk}/").content.decode()
    assert f'hx-get="/replicas/{replica.pk}/log/"' in detail and "pending" in detail  # its first event


def test_delete_asks_first_and_answers_409_naming_what_refers_to_it(login, make_deployment, ready_checkpoint):
    from controlplane.api.models import AuditEntry
    from controlplane.checkpoints.models import Checkpoint

    make_deployment("chat")
    client = login("operator")
    confirm = client.get(f"/checkpoints/{ready_checkpoint.pk}/delete/")
    assert confirm.status_code == 200 and 'id="confirm-delete"' in confirm.content.decode()
    refused = client.post(f"/checkpoints/{ready_checkpoint.pk}/delete/")
    assert refused.status_code == 409
    assert "deployment <strong>chat</strong>" in refused.content.decode()
    assert not AuditEntry.objects.filter(action="delete").exists()
    ready_checkpoint.deployments.all().delete()
    assert client.post(f"/checkpoints/{ready_checkpoint.pk}/delete/").status_code == 302
    assert not Checkpoint.objects.filter(pk=ready_checkpoint.pk).exists()
    entry = AuditEntry.objects.get(action="delete")
    assert entry.object_id == str(ready_checkpoint.pk) and entry.object_type == "checkpoints.checkpoint"


def test_a_deployment_is_deleted_from_its_page_only_once_its_replicas_stopped_and_its_runs_stay(
    login, make_deployment, make_node
):
    from controlplane.api.models import AuditEntry
    from controlplane.benchmarks.models import BenchmarkRun
    from controlplane.serving.models import Deployment, Replica

    deployment = make_deployment("chat", replicas=1)
    run = BenchmarkRun.objects.create(deployment=deployment)
    node = make_node("n1", count=1)
    replica = Replica.create_for(deployment, "created by the reconciler", "reconciler")
    replica.schedule(node, node.accelerators.all()[:1], "reconciler")
    client = login("operator")
    assert (
        f'href="/deployments/{deployment.pk}/delete/"'
        in client.get(f"/deployments/{deployment.pk}/").content.decode()
    )
    asked = client.get(f"/deployments/{deployment.pk}/delete/").content.decode()
    assert "replica <strong>chat-0 (scheduled)</strong>" in asked and 'id="confirm-delete"' not in asked
    refused = client.post(f"/deployments/{deployment.pk}/delete/")
    assert refused.status_code == 409 and "Scale it to 0" in refused.content.decode()
    assert Deployment.objects.filter(pk=deployment.pk).exists()
    assert not AuditEntry.objects.filter(action="delete").exists()

    replica.fail("stopped for the test", "test")
    assert 'id="confirm-delete"' in client.get(f"/deployments/{deployment.pk}/delete/").content.decode()
    assert client.post(f"/deployments/{deployment.pk}/delete/")["Location"] == "/deployments/"
    assert not Deployment.objects.filter(pk=deployment.pk).exists()
    run.refresh_from_db()
    assert run.deployment is None and run.deployment_name == "chat"  # the history stays
    assert AuditEntry.objects.get(action="delete").object_type == "serving.deployment"
    other = make_deployment("other")
    assert login("viewer").post(f"/deployments/{other.pk}/delete/").status_code == 403
    assert Deployment.objects.filter(pk=other.pk).exists()


def test_admin_changes_a_users_role_and_deactivates_them(login):
    from controlplane.api.models import AuditEntry
    from controlplane.api.roles import role_of, set_role
    from django.contrib.auth import get_user_model

    vera = get_user_model().objects.create_user("vera", password="vera-password-9")
    set_role(vera, "viewer")
    admin = login("admin")
    assert f'href="/users/{vera.pk}/"' in admin.get("/users/").content.decode()
    assert (
        admin.post(f"/users/{vera.pk}/", {"email": "", "role": "operator", "is_active": "on"}).status_code
        == 302
    )
    assert role_of(get_user_model().objects.get(pk=vera.pk)) == "operator"
    assert admin.post(f"/users/{vera.pk}/", {"role": "operator", "password": "short"}).status_code == 400
    assert admin.post(f"/users/{vera.pk}/", {"role": "operator"}).status_code == 302  # is_active unticked
    assert not get_user_model().objects.get(pk=vera.pk).is_active
    assert AuditEntry.objects.filter(action="update", object_id=str(vera.pk)).count() == 2
