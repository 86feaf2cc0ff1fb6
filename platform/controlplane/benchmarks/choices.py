from django.db import models


class RunState(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


S = RunState
# from -> states it may move to
RUN_TRANSITIONS: dict[str, set[str]] = {
    S.QUEUED: {S.RUNNING, S.FAILED, S.CANCELLED},
    S.RUNNING: {S.SUCCEEDED, S.FAILED, S.CANCELLED},
    S.SUCCEEDED: set(),
    S.FAILED: set(),
    S.CANCELLED: set(),
}
ACTIVE_STATES = (S.QUEUED, S.RUNNING)
TERMINAL_STATES = (S.SUCCEEDED, S.FAILED, S.CANCELLED)


class Workload(models.TextChoices):
    CHAT_SHORT = "chat-short", "chat-short (short independent prompts)"
    SHARED_PREFIX = "shared-prefix", "shared-prefix (tenants sharing long system prompts)"
    MULTI_TURN = "multi-turn", "multi-turn (conversations resending their history)"


# Actors recorded when no user acted.
ACTOR_SCHEDULER = "system:benchmark-schedule"
ACTOR_RUNNER = "system:benchmark-runner"
