"""Deployment revisions through the API and the page, and the reconciler applying rolling updates."""

import threading
from datetime import timedelta

import pytest
from controlplane.serving.choices import ReplicaState as S
from controlplane.serving.choices import RolloutStatus
from controlplane.serving.models import Deployment, Replica
from controlplane.serving.reconciler import reconcile_deployment
from django.db import connection
from django.db.models.signals import post_save
from django.utils import timezone

pytestmark = pytest.mark.django_db


def _create(api, checkpoint, **fields):
    body = {"name": "chat", "checkpoint": checkpoint.pk, "vendor": "cpu", **fields}
    response = api("operator").post("/api/v1/deployments/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def _states(deployment):
    return list(deployment.replica_set.order_by("ordinal").values_list("revision__number", "state"))


@pytest.mark.django_db(transaction=True)
def test_another_connection_never_sees_a_created_deployment_without_its_revision(
    api, ready_checkpoint, monkeypatch
):
    """The reconciler runs in another process: a deployment it can read must already have its
    first revision, or it launches a replica of no revision."""
    from controlplane.serving import services

    monkeypatch.setattr(services, "reconcile_after_commit", lambda pk: None)
    seen = []

    def look_from_elsewhere(sender, instance, created, **kwargs):
        def read():
            seen.append(list(Deployment.objects.filter(pk=instance.pk).values_list("revision_id", flat=True)))
            connection.close()

        reader = threading.Thread(target=read)
        reader.start()
        reader.join()

    post_save.connect(look_from_elsewhere, sender=Deployment)
    try:
        created = _create(api, ready_checkpoint)
    finally:
        post_save.disconnect(look_from_elsewhere, sender=Deployment)
    assert seen and all(rows == [] for rows in seen), seen
    assert created["revision"] == 1
    assert Deployment.objects.get().revision.number == 1


def test_a_bad_engine_option_is_a_400_on_every_write(api, ready_checkpoint):
    created = _create(api, ready_checkpoint, engine_options={"max_num_seqs": 4})
    url = f"/api/v1/deployments/{created['id']}/"
    patch = api("operator").patch(url, {"engine_options": {"max_num_seqs": "many"}}, format="json")
    assert patch.status_code == 400
    assert patch.json() == {
        "engine_options": ["max_num_seqs: argument --max-num-seqs: invalid int value: 'many'"]
    }
    put = api("operator").put(
        url, {"name": "chat", "checkpoint": ready_checkpoint.pk, "engine_options": {"nope": 1}}, format="json"
    )
    assert put.status_code == 400 and put.json()["engine_options"] == [
        "nope: not an engine option of `chassis serve`"
    ]
    deployment = Deployment.objects.get()
    assert deployment.engine_options == {"max_num_seqs": 4}
    assert list(deployment.revisions.values_list("number", flat=True)) == [1]


def test_changes_make_revisions_and_rollback_restores_one(api, ready_checkpoint):
    created = _create(api, ready_checkpoint, engine_options={"max_num_seqs": 4})
    assert (created["revision"], created["rollout_status"]) == (1, RolloutStatus.COMPLETE)
    url = f"/api/v1/deployments/{created['id']}/"
    updated = api("operator").patch(
        url, {"engine_options": {"max_num_seqs": 8, "dtype": "float32"}}, format="json"
    )
    assert (updated.json()["revision"], updated.json()["rollout_status"]) == (2, RolloutStatus.PROGRESSING)
    same = api("operator").patch(url, {"replicas": 2}, format="json")
    assert same.json()["revision"] == 2  # the replica count is not part of a revision
    revisions = api("viewer").get(f"{url}revisions/").json()
    assert [(r["number"], r["engine_options"], r["dtype"]) for r in revisions] == [
        (2, {"max_num_seqs": 8, "dtype": "float32"}, "float32"),
        (1, {"max_num_seqs": 4}, None),
    ]
    assert revisions[0]["created_by"] == "user:operator-user"

    back = api("operator").post(f"{url}rollback/", {}, format="json")
    assert back.status_code == 202, back.json()
    assert back.json()["revision"] == 1 and back.json()["engine_options"] == {"max_num_seqs": 4}
    again = api("operator").post(f"{url}rollback/", {"revision": 1}, format="json")
    assert again.status_code == 400 and again.json() == {
        "revision": ["revision 1 is already the current revision"]
    }
    missing = api("operator").post(f"{url}rollback/", {"revision": 9}, format="json")
    assert missing.status_code == 400 and missing.json() == {"revision": ["chat has no revision 9"]}
    assert api("viewer").post(f"{url}rollback/", {}, format="json").status_code == 403
    api("operator").patch(url, {"engine_options": {}}, format="json")
    ready_checkpoint.start_validation()  # its files changed: not ready until validated again
    gone = api("operator").post(f"{url}rollback/", {"revision": 1}, format="json")
    assert gone.status_code == 400
    assert gone.json() == {"revision": ["its checkpoint tiny@main is validating, not ready"]}


def test_reconcile_rolls_one_replica_at_a_time(api, ready_checkpoint, make_node):
    make_node("cpu1", vendor="cpu", count=1)
    deployment = Deployment.objects.get(pk=_create(api, ready_checkpoint, replicas=2)["id"])
    reconcile_deployment(deployment.pk, "test")
    for replica in deployment.replica_set.all():
        replica.start_launch(8100 + replica.ordinal, "/tmp/x.log", "t")
        replica.mark_ready("up", "t")
    Replica.objects.update(state_changed_at=timezone.now() - timedelta(seconds=60))
    api("operator").patch(
        f"/api/v1/deployments/{deployment.pk}/", {"engine_options": {"max_num_seqs": 2}}, format="json"
    )

    reconcile_deployment(deployment.pk, "test")
    assert _states(deployment) == [(1, S.READY), (1, S.READY), (2, S.SCHEDULED)]
    surge = deployment.replica_set.get(ordinal=2)
    surge.start_launch(8102, "/tmp/x.log", "t")
    surge.mark_ready("up", "t")
    reconcile_deployment(deployment.pk, "test")  # ready, but not for the minimum ready time yet
    assert _states(deployment) == [(1, S.READY), (1, S.READY), (2, S.READY)]
    Replica.objects.filter(pk=surge.pk).update(state_changed_at=timezone.now() - timedelta(seconds=60))
    reconcile_deployment(deployment.pk, "test")
    assert _states(deployment) == [(1, S.READY), (1, S.DRAINING), (2, S.READY), (2, S.SCHEDULED)]
    deployment.refresh_from_db()
    assert deployment.rollout_reason == "revision 2: 1 of 2 replicas updated"
    drained = deployment.replica_set.get(ordinal=1)
    assert drained.events.last().reason == "replaced by a replica of revision 2 (rolling update)"

    broken = deployment.replica_set.get(ordinal=3)
    broken.start_launch(8103, "/tmp/x.log", "t")
    broken.fail("engine exited (code 1) before it was ready", "t")
    reconcile_deployment(deployment.pk, "test")
    assert [state for _, state in _states(deployment)] == [S.READY, S.DRAINING, S.READY, S.STOPPED]
    deployment.refresh_from_db()
    assert deployment.rollout_status == RolloutStatus.FAILED
    assert deployment.rollout_reason.startswith("revision 2 stopped: replica chat-3 failed to become ready")
    reconcile_deployment(deployment.pk, "test")  # stays stopped: no new surge
    assert deployment.replica_set.count() == 4


def test_restart_replaces_without_a_gap(api, ready_checkpoint, make_node):
    make_node("cpu1", vendor="cpu", count=1)
    deployment = Deployment.objects.get(pk=_create(api, ready_checkpoint, replicas=1)["id"])
    reconcile_deployment(deployment.pk, "test")
    replica = deployment.replica_set.get()
    replica.start_launch(8100, "/tmp/x.log", "t")
    replica.mark_ready("up", "t")
    response = api("operator").post(f"/api/v1/deployments/{deployment.pk}/restart/", {}, format="json")
    assert response.status_code == 202
    reconcile_deployment(deployment.pk, "test")
    assert _states(deployment) == [(1, S.READY), (1, S.SCHEDULED)]
    assert "restart requested by user:operator-user" in replica.events.last().reason


def test_the_page_refuses_a_bad_option_and_rolls_out_a_good_one(login, make_deployment):
    deployment = make_deployment(engine_options={"max_num_seqs": 4})
    deployment.record_revision("test")
    client = login("operator")
    form = {"checkpoint": deployment.checkpoint_id, "tp_size": 1}
    bad = client.post(
        f"/deployments/{deployment.pk}/revise/", {**form, "engine_options": '{"max_num_seqs": "x"}'}
    )
    assert bad.status_code == 400
    assert "max_num_seqs: argument --max-num-seqs: invalid int value" in bad.content.decode()
    good = client.post(
        f"/deployments/{deployment.pk}/revise/", {**form, "engine_options": '{"max_num_seqs": 2}'}
    )
    assert good.status_code == 302
    deployment.refresh_from_db()
    assert (deployment.revision.number, deployment.rollout_status) == (2, RolloutStatus.PROGRESSING)
    page = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert "revision 2: rollout progressing" in page and "Roll back to 1" in page
    refused = client.post(f"/deployments/{deployment.pk}/rollback/2/")
    assert (
        refused.status_code == 400
        and "Rollback refused: revision 2 is already the current revision" in refused.content.decode()
    )
    assert client.post(f"/deployments/{deployment.pk}/rollback/1/").status_code == 302
    deployment.refresh_from_db()
    assert (deployment.revision.number, deployment.engine_options) == (1, {"max_num_seqs": 4})
