"""An Ascend deployment is placed only on a node whose agent reported the NPU runtime (torch_npu);
elsewhere the deployment says why and nothing is launched or relaunched."""

import pytest
from controlplane.serving.choices import ReplicaState as S
from controlplane.serving.reconciler import reconcile_deployment
from django.urls import reverse

pytestmark = pytest.mark.django_db

NO_RUNTIME = (
    "node n1 has 8 Ascend NPUs but no torch_npu runtime (install chassis[ascend] there, then restart "
    "its agent)"
)


def test_ascend_node_without_torch_npu_gets_no_replica_and_the_page_says_why(
    make_node, make_deployment, login
):
    make_node("n1", vendor="ascend", count=8, runtimes=["cpu"])
    deployment = make_deployment(replicas=1, vendor="ascend")
    for _ in range(3):  # reconciling again changes nothing: no launch, no relaunch loop
        assert reconcile_deployment(deployment.pk, "test") == NO_RUNTIME
    replica = deployment.replica_set.get()
    assert replica.state == S.PENDING and replica.launch_attempts == 0 and replica.node is None
    assert list(replica.events.values_list("to_state", flat=True)) == [S.PENDING]
    deployment.refresh_from_db()
    assert (deployment.placement_status, deployment.placement_reason) == ("unschedulable", NO_RUNTIME)
    page = login("viewer").get(reverse("deployment-live", args=[deployment.pk]))
    assert NO_RUNTIME in page.content.decode()


def test_once_the_agent_reports_the_npu_runtime_the_replica_is_placed(make_node, make_deployment):
    make_node("n1", vendor="ascend", count=8, runtimes=["cpu"])
    deployment = make_deployment(replicas=1, vendor="ascend")
    assert reconcile_deployment(deployment.pk, "test") == NO_RUNTIME
    make_node("n1", vendor="ascend", count=8, runtimes=["cpu", "npu"])  # the agent restarted with it
    assert reconcile_deployment(deployment.pk, "test") is None
    assert deployment.replica_set.get().state == S.SCHEDULED


def test_a_node_that_never_reported_runtimes_is_not_refused(make_node, make_deployment):
    make_node("n1", vendor="nvidia", count=1)  # runtimes None: an agent from before the report
    deployment = make_deployment(replicas=1, vendor="nvidia")
    assert reconcile_deployment(deployment.pk, "test") is None


def test_the_nodes_api_shows_the_reported_runtimes(make_node, login):
    node = make_node("n1", vendor="ascend", count=1, runtimes=["cpu"])
    body = login("viewer").get(f"/api/v1/nodes/{node.pk}/").json()
    assert body["runtimes"] == ["cpu"]
