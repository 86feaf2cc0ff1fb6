"""Acceptance 1 end to end: real PostgreSQL, Redis, Celery worker + beat, a node agent and real
`chassis serve` replicas on the tiny checkpoint."""

import os
import signal

import httpx
import pytest
from controlplane.serving import launcher
from controlplane.serving.choices import ReplicaState as S

from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(280)]


def chat(replica) -> str:
    reply = httpx.post(
        f"{replica.url}/v1/chat/completions",
        json={"model": "tiny-chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["message"]["content"]


def transitions(replica) -> list[tuple[str, str]]:
    return list(replica.events.order_by("at", "id").values_list("from_state", "to_state"))


def test_fleet_to_serving_end_to_end(stack, operator_api, tiny_model_dir):
    from controlplane.checkpoints.models import Checkpoint
    from controlplane.fleet.models import Node
    from controlplane.serving.models import Deployment, MetricSample, Replica

    stack.start_all()
    try:
        node = wait_until(
            lambda: Node.objects.filter(name=stack.node, state="up").first(),
            "the agent to register",
            timeout=60,
            poll=0.5,
        )
        assert [a.vendor for a in node.accelerators.all()] == ["cpu"]

        response = operator_api.post(
            "/api/v1/checkpoints/", {"name": "tiny", "path": str(tiny_model_dir)}, format="json"
        )
        assert response.status_code == 201, response.json()
        checkpoint_id = response.json()["id"]
        wait_until(
            lambda: Checkpoint.objects.get(pk=checkpoint_id).state == "ready",
            "the checkpoint to validate",
            timeout=60,
            poll=0.5,
        )

        response = operator_api.post(
            "/api/v1/deployments/",
            {
                "name": "tiny",
                "served_model_name": "tiny-chat",
                "checkpoint": checkpoint_id,
                "replicas": 2,
                "vendor": "cpu",
            },
            format="json",
        )
        assert response.status_code == 201, response.json()
        deployment = Deployment.objects.get(pk=response.json()["id"])
        ready = wait_until(lambda: len(r := list(Replica.objects.filter(deployment=deployment, state=S.READY))) == 2 and r, "2 ready replicas", timeout=150, poll=0.5)  # fmt: skip
        assert len({r.port for r in ready}) == 2
        for replica in ready:
            assert launcher.find_engine(str(replica.uid), replica.pid).pid == replica.pid
            assert chat(replica) is not None
        wait_until(lambda: MetricSample.objects.filter(replica__in=ready, ttft_p50_s__isnull=False).exists(), "a scraped TTFT sample", timeout=30, poll=0.5)  # fmt: skip

        response = operator_api.post(
            f"/api/v1/deployments/{deployment.pk}/scale/", {"replicas": 1}, format="json"
        )
        assert response.status_code == 202
        drained = wait_until(
            lambda: Replica.objects.filter(deployment=deployment, state=S.STOPPED).first(),
            "a drained replica",
            timeout=60,
            poll=0.5,
        )
        assert launcher.find_engine(str(drained.uid)) is None
        assert transitions(drained)[-2:] == [(S.READY, S.DRAINING), (S.DRAINING, S.STOPPED)]
        assert drained.events.get(to_state=S.DRAINING).reason == "scaled down to 1"
        survivor = Replica.objects.get(deployment=deployment, state=S.READY)

        old_pid = survivor.pid
        os.kill(old_pid, signal.SIGKILL)
        relaunched = wait_until(lambda: Replica.objects.filter(pk=survivor.pk, state=S.READY).exclude(pid=old_pid).first(), "reconcile to relaunch the killed replica", timeout=120, poll=0.5)  # fmt: skip
        assert chat(relaunched) is not None
        assert transitions(relaunched)[-5:] == [
            (S.READY, S.FAILED), (S.FAILED, S.PENDING), (S.PENDING, S.SCHEDULED),
            (S.SCHEDULED, S.LAUNCHING), (S.LAUNCHING, S.READY),
        ]  # fmt: skip
        # The last failure is the kill (a loaded machine may have failed a health check before).
        assert f"engine process {old_pid} exited" in relaunched.events.filter(to_state=S.FAILED).last().reason
        assert Replica.objects.filter(deployment=deployment).count() == 2  # relaunched in place, not replaced
        assert set(relaunched.events.values_list("to_state", flat=True)) >= {
            S.PENDING,
            S.SCHEDULED,
            S.LAUNCHING,
            S.READY,
        }
    except BaseException:
        print(stack.logs())
        raise
