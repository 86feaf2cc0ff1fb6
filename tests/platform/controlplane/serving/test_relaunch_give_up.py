"""A replica that fails the same way CHASSIS_RELAUNCH_GIVE_UP_AFTER times in a row stops relaunching
and says why; a restart, a scale change or a new revision gives it another chance."""

from datetime import timedelta

import pytest
from controlplane.serving import services
from controlplane.serving.choices import ReplicaState as S
from controlplane.serving.models import Replica
from controlplane.serving.models.replica import failure_signature
from controlplane.serving.reconciler import reconcile_deployment
from django.utils import timezone

pytestmark = pytest.mark.django_db


@pytest.fixture
def give_up_after_3(settings):
    settings.CHASSIS_SERVING = {**settings.CHASSIS_SERVING, "RELAUNCH_GIVE_UP_AFTER": 3}


def launch_and_fail(replica: Replica, reason: str) -> Replica:
    """One launch of a scheduled replica that fails, then the backoff runs out and reconcile acts."""
    replica.refresh_from_db()
    assert replica.state == S.SCHEDULED, replica.reason
    replica.start_launch(8100, "/tmp/x", "t")
    replica.fail(reason, "t", backoff=timedelta(seconds=60), give_up_after=3)
    Replica.objects.filter(pk=replica.pk, next_attempt_at__isnull=False).update(
        next_attempt_at=timezone.now() - timedelta(seconds=1)
    )
    reconcile_deployment(replica.deployment_id, "test")
    replica.refresh_from_db()
    return replica


@pytest.fixture
def broken(make_node, make_deployment, give_up_after_3):
    make_node("n1", count=2)
    deployment = make_deployment(replicas=1, vendor="nvidia")
    reconcile_deployment(deployment.pk, "test")
    replica = deployment.replica_set.get()
    for pid in (4101, 4177):  # the pid differs from launch to launch; the failure is the same
        assert launch_and_fail(replica, f"engine process {pid} exited (code 1)").state == S.SCHEDULED
    replica = launch_and_fail(replica, "engine process 4230 exited (code 1)")
    return deployment, replica


def test_third_identical_failure_stops_relaunching_with_the_reason(broken):
    deployment, replica = broken
    assert replica.state == S.FAILED and replica.relaunch_stopped
    assert replica.reason == "gave up after 3 identical failures: engine process 4230 exited (code 1)"
    for _ in range(2):
        reconcile_deployment(deployment.pk, "test")
    assert deployment.replica_set.get().state == S.FAILED  # stays failed; no replacement either
    assert replica.events.filter(to_state=S.LAUNCHING).count() == 3


def test_a_different_failure_or_a_ready_spell_starts_the_count_over(
    make_node, make_deployment, give_up_after_3
):
    make_node("n1", count=1)
    deployment = make_deployment(replicas=1, vendor="nvidia")
    reconcile_deployment(deployment.pk, "test")
    replica = deployment.replica_set.get()
    launch_and_fail(replica, "engine process 1 exited (code 1)")
    launch_and_fail(replica, "engine not healthy within 300s; stopped it")
    replica.start_launch(8100, "/tmp/x", "t")
    replica.mark_ready("up", "t")
    replica.fail("engine process 2 exited (code 1)", "t", give_up_after=3)
    assert (replica.failure_streak, replica.relaunch_stopped) == (1, False)


def test_restart_gives_it_another_chance(broken):
    deployment, replica = broken
    services.restart_replica(replica, "user:ops")
    replica.refresh_from_db()
    assert replica.state == S.PENDING and not replica.relaunch_stopped and replica.failure_streak == 0
    reconcile_deployment(deployment.pk, "test")
    assert launch_and_fail(replica, "engine process 9 exited (code 1)").state == S.SCHEDULED


def test_scale_change_gives_it_another_chance(broken):
    deployment, replica = broken
    services.scale(deployment, 2, "user:ops")
    reconcile_deployment(deployment.pk, "test")
    replica.refresh_from_db()
    assert replica.state == S.SCHEDULED and not replica.relaunch_stopped
    assert replica.events.filter(reason="replica count changed from 1 to 2").exists()
    assert deployment.replica_set.filter(state=S.SCHEDULED).count() == 2


def test_new_revision_replaces_it(broken):
    deployment, replica = broken
    deployment.engine_options = {"max_num_seqs": 8}
    services.save_spec(deployment, "user:ops")
    reconcile_deployment(deployment.pk, "test")
    fresh = deployment.replica_set.exclude(pk=replica.pk).get()
    assert fresh.state == S.SCHEDULED and fresh.revision_id == deployment.revision_id


@pytest.mark.slow
def test_a_broken_checkpoint_fails_identically_three_times_then_stays_failed(
    make_node, give_up_after_3, settings, tmp_path, login
):
    """Real `chassis serve` processes on a checkpoint whose config.json is not JSON."""
    from controlplane.checkpoints.models import Checkpoint
    from controlplane.serving import execution
    from controlplane.serving.models import Deployment
    from django.urls import reverse

    settings.VAR_DIR = tmp_path
    settings.CHASSIS_SERVING = {**settings.CHASSIS_SERVING, "LAUNCH_TIMEOUT_S": 120}
    model_dir = tmp_path / "broken"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": ')
    checkpoint = Checkpoint.objects.create(name="broken", path=str(model_dir))
    checkpoint.start_validation()
    checkpoint.mark_ready({})  # as if it had been valid when checked
    make_node("local", vendor="cpu", count=1)
    deployment = Deployment.objects.create(name="broken", checkpoint=checkpoint, replicas=1, vendor="cpu")
    reconcile_deployment(deployment.pk, "test")
    replica = deployment.replica_set.get()
    reasons = []
    for _ in range(3):
        assert replica.state == S.SCHEDULED
        assert execution.launch(replica.pk) == "engine exited"
        replica.refresh_from_db()
        reasons.append(replica.reason)
        Replica.objects.filter(pk=replica.pk, next_attempt_at__isnull=False).update(
            next_attempt_at=timezone.now() - timedelta(seconds=1)
        )
        reconcile_deployment(deployment.pk, "test")
        replica.refresh_from_db()
    assert "not valid JSON" in reasons[0], reasons[0]
    assert reasons[2].startswith("gave up after 3 identical failures: engine exited (code")
    # Only numbers (the engine's pid) differ from one launch to the next.
    without_prefix = reasons[2].removeprefix("gave up after 3 identical failures: ")
    assert len({failure_signature(reason) for reason in (*reasons[:2], without_prefix)}) == 1
    assert replica.state == S.FAILED and replica.relaunch_stopped and replica.launch_attempts == 3
    page = login("viewer").get(reverse("deployment-live", args=[deployment.pk])).content.decode()
    assert "gave up after 3 identical failures: engine exited (code" in page
