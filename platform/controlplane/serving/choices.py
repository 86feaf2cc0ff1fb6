from django.db import models


class ReplicaState(models.TextChoices):
    PENDING = "pending", "pending"
    SCHEDULED = "scheduled", "scheduled"
    LAUNCHING = "launching", "launching"
    READY = "ready", "ready"
    DRAINING = "draining", "draining"
    STOPPED = "stopped", "stopped"
    FAILED = "failed", "failed"


S = ReplicaState
# from -> states it may move to
REPLICA_TRANSITIONS: dict[str, set[str]] = {
    S.PENDING: {S.SCHEDULED, S.FAILED, S.STOPPED},
    S.SCHEDULED: {S.LAUNCHING, S.FAILED, S.STOPPED},
    S.LAUNCHING: {S.READY, S.DRAINING, S.FAILED},
    S.READY: {S.DRAINING, S.FAILED},
    S.DRAINING: {S.STOPPED, S.FAILED},
    S.FAILED: {S.PENDING, S.STOPPED},
    S.STOPPED: set(),
}
# Holding accelerators (and a port) on a node.
HOLDING_STATES = (S.SCHEDULED, S.LAUNCHING, S.READY, S.DRAINING)
# A process may exist for the replica on its node.
PROCESS_STATES = (S.LAUNCHING, S.READY, S.DRAINING)
# Counted against the desired replica count (failed ones are retried, so they still count).
ACTIVE_STATES = (S.PENDING, S.SCHEDULED, S.LAUNCHING, S.READY, S.FAILED)
TERMINAL_STATES = (S.STOPPED,)
# Which replicas go first when scaling down: those doing the least useful work.
SCALE_DOWN_ORDER = (S.FAILED, S.PENDING, S.SCHEDULED, S.LAUNCHING, S.READY)


class Role(models.TextChoices):
    MIXED = "mixed", "mixed"
    PREFILL = "prefill", "prefill"
    DECODE = "decode", "decode"


class RoutingPolicy(models.TextChoices):
    CACHE_AWARE = "cache-aware", "cache-aware"
    LEAST_LOAD = "least-load", "least-load"
    ROUND_ROBIN = "round-robin", "round-robin"
    SESSION = "session", "session (sticky per user or x-session-id)"


class RolloutStatus(models.TextChoices):
    COMPLETE = "complete", "complete"
    PROGRESSING = "progressing", "progressing"
    FAILED = "failed", "failed"


class PlacementStatus(models.TextChoices):
    OK = "ok", "ok"
    UNSCHEDULABLE = "unschedulable", "unschedulable"


# Actors recorded on replica events when no user acted.
ACTOR_RECONCILE = "system:reconcile"
ACTOR_SCRAPE = "system:scrape"
ACTOR_HEARTBEATS = "system:heartbeats"


def agent_actor(node_name: str) -> str:
    return f"agent:{node_name}"


def user_actor(user) -> str:
    return f"user:{user.get_username()}"
