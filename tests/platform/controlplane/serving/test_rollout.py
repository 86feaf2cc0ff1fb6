"""The rolling-update decision on plain values: replica states in, what to create and remove out."""

from controlplane.serving.choices import ReplicaState as S
from controlplane.serving.choices import RolloutStatus
from controlplane.serving.rollout import ReplicaView, plan


def old(id, state=S.READY):
    return ReplicaView(id=id, ordinal=id, state=state, current=False, available=state == S.READY)


def new(id, state=S.READY, available=None, reason=""):
    warm = state == S.READY if available is None else available
    return ReplicaView(
        id=id, ordinal=id, state=state, current=True, available=warm, reason=reason, name=f"r-{id}"
    )


def test_nothing_outdated_is_plain_scaling():
    assert plan(3, [new(1)], 2, None).create == 2
    down = plan(1, [new(1), new(2, S.PENDING), new(3, S.FAILED)], 2, None)
    assert (down.create, down.stop, down.drain, down.status) == (0, [3, 2], [], RolloutStatus.COMPLETE)


def test_a_new_revision_surges_one_replica_and_keeps_the_old_ones():
    decision = plan(2, [old(1), old(2)], 3, None)
    assert (decision.create, decision.stop, decision.drain) == (1, [], [])
    assert decision.status == RolloutStatus.PROGRESSING
    assert decision.reason == "revision 3: 0 of 2 replicas updated"


def test_waits_while_the_new_replica_starts_or_warms_up():
    for state in (S.PENDING, S.SCHEDULED, S.LAUNCHING, S.READY):
        decision = plan(2, [old(1), old(2), new(3, state, available=False)], 3, None)
        assert (decision.create, decision.stop, decision.drain) == (0, [], [])


def test_an_available_new_replica_lets_one_old_drain_and_the_next_surge():
    decision = plan(2, [old(1), old(2), new(3)], 3, None)
    assert (decision.create, decision.drain) == (1, [2])
    assert decision.reason == "revision 3: 1 of 2 replicas updated"


def test_last_old_replica_drains_once_every_new_one_is_available():
    decision = plan(2, [old(1), new(3), new(4)], 3, None)
    assert (decision.create, decision.drain, decision.stop) == (0, [1], [])


def test_failed_or_unplaced_old_replicas_go_first_without_a_drain():
    decision = plan(2, [old(1), old(2, S.FAILED), new(3)], 3, None)
    assert (decision.stop, decision.drain, decision.create) == ([2], [], 1)


def test_a_failed_new_replica_stops_the_rollout_and_keeps_the_old_ones():
    decision = plan(2, [old(1), old(2), new(3, S.FAILED, reason="engine exited (code 1)")], 3, None)
    assert (decision.create, decision.stop, decision.drain) == (0, [3], [])
    assert decision.status == RolloutStatus.FAILED
    assert decision.reason.startswith("revision 3 stopped: replica r-3 failed to become ready")
    assert "engine exited (code 1)" in decision.reason


def test_a_failed_rollout_stays_stopped_and_keeps_new_replicas_already_serving():
    decision = plan(2, [old(1), new(3), new(4, S.PENDING)], 3, "revision 3 stopped: ...")
    assert (decision.create, decision.stop, decision.drain) == (0, [4], [])
    assert (decision.status, decision.reason) == (RolloutStatus.FAILED, "revision 3 stopped: ...")


def test_a_failed_rollout_still_scales_down():
    decision = plan(1, [old(1), old(2)], 3, "revision 3 stopped: ...")
    assert (decision.drain, decision.create) == ([2], 0)


def test_rolling_restart_of_one_replica_surges_before_it_drains():
    restarting = ReplicaView(id=1, ordinal=1, state=S.READY, current=False, available=True)
    assert plan(1, [restarting], 2, None).create == 1
    assert plan(1, [restarting, new(2, S.LAUNCHING)], 2, None).drain == []
    assert plan(1, [restarting, new(2)], 2, None).drain == [1]


def test_scaling_to_zero_mid_rollout_removes_everything():
    decision = plan(0, [old(1), new(2, S.LAUNCHING)], 3, None)
    assert (sorted(decision.drain), decision.create) == ([1, 2], 0)
