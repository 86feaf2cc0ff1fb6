"""Rolling updates as a pure decision: the replicas' states in, what to create and remove out.

One replica at a time is surged on the target revision; an outdated replica is removed only once a
current one has been ready for the minimum ready time (so the gateway routes to it first). A
current replica that fails stops the rollout: the outdated replicas keep serving until the
operator rolls back or sets a new revision. With nothing outdated this is plain scaling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.serving.choices import SCALE_DOWN_ORDER, ReplicaState, RolloutStatus

S = ReplicaState
# Removed without a drain: no engine process is serving on them.
STOP_DIRECTLY = (S.FAILED, S.PENDING, S.SCHEDULED)


@dataclass(frozen=True)
class ReplicaView:
    id: int
    ordinal: int
    state: str  # one of ACTIVE_STATES
    current: bool  # on the target revision and no restart asked for
    available: bool = False  # ready for at least the minimum ready time
    reason: str = ""
    name: str = ""


@dataclass
class RolloutPlan:
    create: int = 0
    stop: list[int] = field(default_factory=list)
    drain: list[int] = field(default_factory=list)
    status: str = RolloutStatus.COMPLETE
    reason: str = ""

    def remove(self, replicas: list[ReplicaView]) -> None:
        for replica in replicas:
            (self.stop if replica.state in STOP_DIRECTLY else self.drain).append(replica.id)


def least_useful(replicas: list[ReplicaView], count: int) -> list[ReplicaView]:
    """The ``count`` replicas doing the least useful work (those scaling down removes first)."""
    ranked = sorted(replicas, key=lambda r: (SCALE_DOWN_ORDER.index(r.state), -r.ordinal))
    return ranked[: max(count, 0)]


def plan(desired: int, replicas: list[ReplicaView], revision: int | None, failure: str | None) -> RolloutPlan:
    """``failure``: why the rollout already failed, if it did (a failed rollout stays failed until a
    new revision or a rollback)."""
    current = [r for r in replicas if r.current]
    outdated = [r for r in replicas if not r.current]
    broken = [r for r in current if r.state == S.FAILED]
    if failure is None and broken and outdated:
        failure = (
            f"revision {revision} stopped: replica {broken[0].name or broken[0].id} failed to become "
            f"ready; the previous replicas keep serving. {broken[0].reason}"
        )[:2000]
    if failure is not None:
        return _failed(desired, current, outdated, failure)
    result = RolloutPlan()
    surplus = least_useful(current, len(current) - desired)
    result.remove(surplus)
    current = [r for r in current if r not in surplus]
    if not outdated:
        result.create = desired - len(current)
        return result
    available = [r for r in current if r.available]
    keep_outdated = min(len(outdated), max(desired - len(available), 0))
    result.remove(least_useful(outdated, len(outdated) - keep_outdated))
    surging = any(not r.available for r in current)
    if not surging and len(current) < desired and len(current) + keep_outdated <= desired:
        result.create = 1
    result.status = RolloutStatus.PROGRESSING
    result.reason = f"revision {revision}: {len(available)} of {desired} replicas updated"
    return result


def _failed(
    desired: int, current: list[ReplicaView], outdated: list[ReplicaView], failure: str
) -> RolloutPlan:
    """Take out the current replicas that are not serving; keep the rest, within the desired count."""
    result = RolloutPlan(status=RolloutStatus.FAILED, reason=failure)
    result.remove([r for r in current if r.state != S.READY])
    kept = [r for r in current if r.state == S.READY] + outdated
    result.remove(least_useful(kept, len(kept) - desired))
    return result
