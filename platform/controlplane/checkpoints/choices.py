from django.db import models


class CheckpointState(models.TextChoices):
    REGISTERED = "registered", "registered"
    VALIDATING = "validating", "validating"
    READY = "ready", "ready"
    INVALID = "invalid", "invalid"


C = CheckpointState
CHECKPOINT_TRANSITIONS: dict[str, set[str]] = {
    C.REGISTERED: {C.VALIDATING},
    C.VALIDATING: {C.READY, C.INVALID},
    C.READY: {C.VALIDATING},
    C.INVALID: {C.VALIDATING},
}
TERMINAL_STATES = (C.READY, C.INVALID)
