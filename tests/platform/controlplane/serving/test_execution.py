"""Node-side execution against real `chassis serve` processes on the tiny checkpoint."""

import os
import signal
import threading
from datetime import timedelta

import httpx
import pytest
from controlplane.serving import execution, launcher
from controlplane.serving.choices import ReplicaState as S
from controlplane.serving.models import Replica
from controlplane.serving.reconciler import reconcile_deployment
from django.utils import timezone

from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def cpu_replica(make_node, tiny_model_dir, settings, tmp_path):
    from controlplane.checkpoints.models import Checkpoint
    from controlplane.serving.models import Deployment

    settings.VAR_DIR = tmp_path
    settings.CHASSIS_SERVING = {**settings.CHASSIS_SERVING, "LAUNCH_TIMEOUT_S": 120, "STOP_TIMEOUT_S": 10}
    make_node("local", vendor="cpu", count=1)
    checkpoint = Checkpoint.objects.create(name="tiny", path=str(tiny_model_dir))
    checkpoint.start_validation()
    checkpoint.mark_ready({})
    deployment = Deployment.objects.create(name="tiny", checkpoint=checkpoint, replicas=1, vendor="cpu")
    reconcile_deployment(deployment.pk, "test")
    replica = deployment.replica_set.get()
    assert replica.state == S.SCHEDULED
    yield replica
    for engine_id, engine in launcher.running_engines().items():
        if engine_id == str(replica.uid):
            launcher.stop_process(engine.pid, 5)


def engines_for(replica) -> list[int]:
    return [e.pid for uid, e in launcher.running_engines().items() if uid == str(replica.uid)]


def test_launch_twice_at_once_starts_one_engine_then_drains(require_postgres, cpu_replica):
    from django.db import connection

    results = []

    def launch_in_thread():
        try:
            results.append(execution.launch(cpu_replica.pk))
        finally:
            connection.close()  # each thread has its own connection; leave none behind

    threads = [threading.Thread(target=launch_in_thread) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert sorted(results) == ["ready", "skipped: replica is launching"] or sorted(results) == [
        "ready", "skipped: replica is ready",
    ]  # fmt: skip
    assert execution.launch(cpu_replica.pk) == "skipped: replica is ready"
    replica = Replica.objects.get(pk=cpu_replica.pk)
    assert (
        replica.state == S.READY and len(engines_for(replica)) == 1 and engines_for(replica) == [replica.pid]
    )
    assert replica.events.filter(to_state=S.LAUNCHING).count() == 1

    reply = httpx.post(
        f"{replica.url}/v1/chat/completions",
        json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=60,
    )
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] is not None

    replica.drain("test drain", "test")
    outcome = execution.drain(replica.pk)
    assert "exited after SIGTERM" in outcome
    replica.refresh_from_db()
    assert replica.state == S.STOPPED and engines_for(replica) == []
    assert execution.drain(replica.pk) == "skipped: replica is stopped"


def test_observer_notices_a_killed_engine(cpu_replica):
    assert execution.launch(cpu_replica.pk) == "ready"
    replica = Replica.objects.get(pk=cpu_replica.pk)
    os.kill(replica.pid, signal.SIGKILL)
    # SIGKILL is delivered asynchronously: on a loaded machine the process can still be alive for the
    # first observation, so observe the way the heartbeat does, repeatedly.
    for _ in range(40):
        execution.observe_node(replica.node)
        replica.refresh_from_db()
        if replica.state != S.READY:
            break
        threading.Event().wait(0.25)
    assert replica.state == S.FAILED
    assert replica.reason == f"engine process {replica.pid} exited (code -9)"
    assert replica.next_attempt_at is not None


def test_observer_adopts_an_orphaned_launch(cpu_replica):
    """The agent died after starting the engine: the next agent's heartbeat finishes the launch."""
    replica = cpu_replica
    port = launcher.free_port("127.0.0.1", [])
    replica.start_launch(port, "", "agent:dead")
    deployment = replica.deployment
    command = launcher.build_command(
        model_dir=deployment.checkpoint.path, host="127.0.0.1", port=port, vendor="cpu",
        served_model_name="tiny", replica_id=str(replica.uid), options={},
    )  # fmt: skip
    log_path = launcher.Path(replica.deployment.checkpoint.path).parent / f"{replica.uid}.log"
    pid = launcher.start_engine(command, launcher.engine_env("cpu", [0]), log_path)
    for _ in range(240):
        execution.observe_node(replica.node)
        replica.refresh_from_db()
        if replica.state != S.LAUNCHING:
            break
        threading.Event().wait(0.5)
    assert replica.state == S.READY and replica.pid == pid
    assert "(seen by the agent)" in replica.reason


def _multi_rank_replica(make_node, settings, tmp_path, model_dir, **sizes):
    """A ready-to-launch CPU replica of a 2-rank deployment (``sizes``: tp_size, or ep_size/dp_size)."""
    from controlplane.checkpoints.models import Checkpoint
    from controlplane.serving.models import Deployment

    settings.VAR_DIR = tmp_path
    settings.CHASSIS_SERVING = {**settings.CHASSIS_SERVING, "LAUNCH_TIMEOUT_S": 120, "STOP_TIMEOUT_S": 10}
    make_node("local", vendor="cpu", count=2)
    checkpoint = Checkpoint.objects.create(name="tiny", path=str(model_dir))
    checkpoint.start_validation()
    checkpoint.mark_ready({})
    deployment = Deployment.objects.create(
        name="tiny-2-ranks", checkpoint=checkpoint, replicas=1, vendor="cpu", **sizes
    )
    reconcile_deployment(deployment.pk, "test")
    return deployment, deployment.replica_set.get()


def _rank_processes(replica) -> list:
    import psutil

    return [p for p in psutil.Process(replica.pid).children() if "spawn_main" in " ".join(p.cmdline())]


def _kill_rank_1_until_failed(replica) -> None:
    """SIGKILL the replica's rank 1; wait for the node's observation to fail the replica."""
    [rank1] = _rank_processes(replica)
    os.kill(rank1.pid, signal.SIGKILL)

    def observed_failed() -> bool:
        execution.observe_node(replica.node)
        replica.refresh_from_db()
        return replica.state == S.FAILED

    wait_until(observed_failed, "the node's observation to fail the replica", poll=0.5)
    assert replica.reason == f"engine process {replica.pid} exited (code 1)"


def _stop_engines_of(replica) -> None:
    for engine_id, engine in launcher.running_engines().items():
        if engine_id == str(replica.uid):
            launcher.stop_process(engine.pid, 5)


def test_dead_expert_parallel_rank_fails_the_replica_and_it_is_relaunched(
    make_node, tiny_models, settings, tmp_path
):
    """An EP=2 CPU replica (`--ep 2 --dp 2`, a tiny Qwen3-MoE): SIGKILL rank 1 and the engine exits
    by itself; the agent's observer marks the replica failed, and once its backoff is over the
    reconciler relaunches it and it serves again with both ranks."""
    deployment, replica = _multi_rank_replica(
        make_node, settings, tmp_path, tiny_models["qwen3_moe"], ep_size=2, dp_size=2
    )
    try:
        assert execution.launch(replica.pk) == "ready"
        replica.refresh_from_db()
        _kill_rank_1_until_failed(replica)
        assert "expert-parallel rank 1 of 2" in launcher.log_tail(replica.log_path)
        first_pid = replica.pid

        Replica.objects.filter(pk=replica.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
        reconcile_deployment(deployment.pk, "test")
        replica.refresh_from_db()
        assert replica.state == S.SCHEDULED
        assert execution.launch(replica.pk) == "ready"
        replica.refresh_from_db()
        assert replica.pid != first_pid and len(_rank_processes(replica)) == 1
    finally:
        _stop_engines_of(replica)


def test_dead_tensor_parallel_rank_fails_the_replica(make_node, tiny_model_dir, settings, tmp_path):
    """A TP=2 CPU replica (`--tp 2`, two rank processes): SIGKILL rank 1 and the engine exits by
    itself; the agent's observer then marks the replica failed with a relaunch time."""
    _deployment, replica = _multi_rank_replica(make_node, settings, tmp_path, tiny_model_dir, tp_size=2)
    try:
        assert execution.launch(replica.pk) == "ready"
        replica.refresh_from_db()
        assert len(_rank_processes(replica)) == 1
        _kill_rank_1_until_failed(replica)
        assert replica.next_attempt_at is not None
        assert "tensor-parallel rank 1 of 2" in launcher.log_tail(replica.log_path)
    finally:
        _stop_engines_of(replica)
