"""Acceptance 5: the control plane and the agent die mid-launch; after restart reconcile and the
agent pick the replica up again, and exactly one engine serves it."""

import pytest
from controlplane.serving import launcher
from controlplane.serving.choices import ReplicaState as S

from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]


def test_restart_mid_launch_is_picked_up(stack, operator_api, tiny_model_dir):
    from controlplane.checkpoints.models import Checkpoint
    from controlplane.fleet.models import Node
    from controlplane.serving.models import Replica

    stack.start_all()
    try:
        wait_until(
            lambda: Node.objects.filter(name=stack.node).exists(),
            "the agent to register",
            timeout=60,
            poll=0.5,
        )
        checkpoint = Checkpoint.objects.create(name="tiny", path=str(tiny_model_dir))
        checkpoint.start_validation()
        checkpoint.mark_ready({})
        response = operator_api.post(
            "/api/v1/deployments/",
            {"name": "tiny", "checkpoint": checkpoint.pk, "replicas": 1, "vendor": "cpu"},
            format="json",
        )
        assert response.status_code == 201
        replica = wait_until(lambda: Replica.objects.filter(deployment_id=response.json()["id"], state=S.LAUNCHING).first(), "the launch to begin", timeout=60, poll=0.5)  # fmt: skip
        for name in ("agent", "worker", "beat"):  # everything but the database and the broker
            stack.kill(name)
        replica.refresh_from_db()
        assert replica.state == S.LAUNCHING  # nobody is left to finish the launch

        stack.start_all()
        ready = wait_until(
            lambda: Replica.objects.filter(pk=replica.pk, state=S.READY).first(),
            "the replica to be ready",
            timeout=120,
            poll=0.5,
        )
        engines = [e.pid for uid, e in launcher.running_engines().items() if uid == str(replica.uid)]
        assert engines == [ready.pid]
        states = list(ready.events.values_list("to_state", flat=True))
        assert states[:3] == [S.PENDING, S.SCHEDULED, S.LAUNCHING] and states[-1] == S.READY
    except BaseException:
        print(stack.logs())
        raise
