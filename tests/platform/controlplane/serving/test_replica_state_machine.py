import pytest
from controlplane.serving.choices import ReplicaState as S
from controlplane.serving.models import Replica, ReplicaEvent, StaleReplicaState

pytestmark = pytest.mark.django_db


def test_every_transition_is_an_event(make_deployment, make_node):
    node = make_node("n1")
    replica = Replica.create_for(make_deployment(), "scaling to 1", "user:alice")
    replica.schedule(node, node.accelerators.all()[:1], "system:reconcile")
    replica.start_launch(8100, "/tmp/log", "agent:n1")
    replica.mark_ready("healthy", "agent:n1")
    replica.drain("scaled down to 0", "system:reconcile")
    replica.stop("drained", "agent:n1")
    events = list(ReplicaEvent.objects.filter(replica=replica).values_list("from_state", "to_state", "actor"))
    assert events == [
        ("", S.PENDING, "user:alice"),
        (S.PENDING, S.SCHEDULED, "system:reconcile"),
        (S.SCHEDULED, S.LAUNCHING, "agent:n1"),
        (S.LAUNCHING, S.READY, "agent:n1"),
        (S.READY, S.DRAINING, "system:reconcile"),
        (S.DRAINING, S.STOPPED, "agent:n1"),
    ]
    replica.refresh_from_db()
    assert replica.state == S.STOPPED and replica.reason == "drained" and replica.accelerators.count() == 0


def test_forbidden_transition_is_refused_without_event(make_deployment):
    replica = Replica.create_for(make_deployment(), "new", "t")
    with pytest.raises(ValueError, match="cannot go from pending to ready"):
        replica.mark_ready("nope", "t")
    assert ReplicaEvent.objects.filter(replica=replica).count() == 1


def test_stale_copy_loses_the_race(make_deployment, make_node):
    node = make_node("n1")
    replica = Replica.create_for(make_deployment(), "new", "t")
    other_copy = Replica.objects.get(pk=replica.pk)
    replica.schedule(node, [], "first")
    with pytest.raises(StaleReplicaState, match="is scheduled, not pending"):
        other_copy.schedule(node, [], "second")
    assert ReplicaEvent.objects.filter(replica=replica, to_state=S.SCHEDULED).count() == 1


def test_url_only_with_host_and_port(make_deployment):
    replica = Replica(deployment=make_deployment(), ordinal=0, host="10.0.0.2", port=8101)
    assert replica.url == "http://10.0.0.2:8101"
    assert Replica(deployment=replica.deployment, ordinal=1, host="::1", port=8100).url == "http://[::1]:8100"
    assert Replica(deployment=replica.deployment, ordinal=2).url is None
