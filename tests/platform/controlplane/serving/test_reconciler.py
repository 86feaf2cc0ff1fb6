from datetime import timedelta

import pytest
from controlplane.serving.choices import ReplicaState as S
from controlplane.serving.models import Deployment, Replica
from controlplane.serving.reconciler import reconcile_deployment
from django.utils import timezone

pytestmark = pytest.mark.django_db


def states(deployment):
    return sorted(deployment.replica_set.values_list("state", flat=True))


def test_scale_up_places_replicas_on_free_gpus_without_double_booking(make_node, make_deployment):
    make_node("n1", count=4)
    deployment = make_deployment(replicas=3, tp_size=2, vendor="nvidia")
    reason = reconcile_deployment(deployment.pk, "test")
    assert reason == "needs 2 nvidia in one domain; largest free block is 0"
    assert states(deployment) == [S.PENDING, S.SCHEDULED, S.SCHEDULED]
    held = [
        set(r.accelerators.values_list("index", flat=True))
        for r in deployment.replica_set.filter(state=S.SCHEDULED)
    ]
    assert sorted(map(sorted, held)) == [[0, 1], [2, 3]]
    deployment.refresh_from_db()
    assert deployment.placement_status == "unschedulable"


def test_impossible_placement_leaves_deployment_unschedulable_with_reason(make_node, make_deployment):
    make_node("n1", count=4)
    make_node("n2", count=2)
    deployment = make_deployment(replicas=1, tp_size=8, vendor="nvidia")
    reconcile_deployment(deployment.pk, "test")
    deployment.refresh_from_db()
    assert deployment.placement_status == "unschedulable"
    assert deployment.placement_reason == "needs 8 nvidia in one domain; largest free block is 4"
    assert states(deployment) == [S.PENDING]


def test_cpu_accelerator_is_shared(make_node, make_deployment):
    make_node("cpu1", vendor="cpu", count=1)
    deployment = make_deployment(replicas=2, vendor="cpu")
    assert reconcile_deployment(deployment.pk, "test") is None
    assert states(deployment) == [S.SCHEDULED, S.SCHEDULED]


def test_scale_down_prefers_replicas_doing_least(make_node, make_deployment):
    node = make_node("n1", count=4)
    deployment = make_deployment(replicas=3, vendor="nvidia")
    reconcile_deployment(deployment.pk, "test")
    first, second, third = deployment.replica_set.order_by("ordinal")
    for replica in (first, second):
        replica.start_launch(8100 + replica.ordinal, "/tmp/x", "t")
        replica.mark_ready("up", "t")
    Deployment.objects.filter(pk=deployment.pk).update(replicas=1)
    reconcile_deployment(deployment.pk, "test")
    first.refresh_from_db(), second.refresh_from_db(), third.refresh_from_db()
    assert (first.state, second.state, third.state) == (S.READY, S.DRAINING, S.STOPPED)
    assert second.reason == "scaled down to 1"
    assert node.accelerators.filter(replicas__state__in=[S.READY, S.DRAINING]).count() == 2


def test_failed_replica_is_relaunched_after_backoff(make_node, make_deployment):
    make_node("n1", count=1)
    deployment = make_deployment(replicas=1, vendor="nvidia")
    reconcile_deployment(deployment.pk, "test")
    replica = deployment.replica_set.get()
    replica.start_launch(8100, "/tmp/x", "t")
    replica.fail("engine exited", "t", backoff=timedelta(seconds=60))
    reconcile_deployment(deployment.pk, "test")
    replica.refresh_from_db()
    assert replica.state == S.FAILED  # still backing off
    Replica.objects.filter(pk=replica.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    reconcile_deployment(deployment.pk, "test")
    replica.refresh_from_db()
    assert replica.state == S.SCHEDULED
    assert list(replica.events.values_list("to_state", flat=True))[-2:] == [S.PENDING, S.SCHEDULED]
    assert (
        "relaunch attempt 2 after: engine exited" in replica.events.filter(to_state=S.PENDING).last().reason
    )


def test_heartbeat_silence_loses_node_and_fails_its_replicas(make_node, make_deployment, settings):
    from controlplane.fleet.models import Node
    from controlplane.fleet.tasks import check_heartbeats

    node = make_node("n1", count=1)
    deployment = make_deployment(replicas=1, vendor="nvidia")
    reconcile_deployment(deployment.pk, "test")
    Node.objects.filter(pk=node.pk).update(last_heartbeat=timezone.now() - timedelta(minutes=5))
    assert check_heartbeats() == ["n1"]
    node.refresh_from_db()
    replica = deployment.replica_set.get()
    assert node.state == "lost"
    assert replica.state == S.FAILED and replica.reason.startswith("node n1 lost: no heartbeat for")
    node.record_heartbeat()
    assert Node.objects.get(pk=node.pk).state == "up"
