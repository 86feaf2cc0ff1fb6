from celery import shared_task
from django.core.exceptions import ValidationError
from django.db import transaction

from controlplane.checkpoints.choices import CheckpointState
from controlplane.checkpoints.models import Checkpoint
from controlplane.checkpoints.validation import inspect
from engine.checkpoint.errors import CheckpointError


@shared_task(name="checkpoints.validate_checkpoint")
def validate_checkpoint(checkpoint_id: int) -> str:
    """registered|ready|invalid -> validating -> ready | invalid (with the reason). Safe to run twice."""
    with transaction.atomic():
        checkpoint = Checkpoint.objects.select_for_update().filter(pk=checkpoint_id).first()
        if checkpoint is None:
            return "gone"
        if checkpoint.state != CheckpointState.VALIDATING:
            try:
                checkpoint.start_validation()
            except ValidationError as exc:
                return f"skipped: {exc.messages[0]}"
    try:
        facts = inspect(checkpoint.path)
    except CheckpointError as exc:
        checkpoint.mark_invalid(str(exc))
        return "invalid"
    except OSError as exc:
        checkpoint.mark_invalid(f"{checkpoint.path}: cannot read ({exc})")
        return "invalid"
    checkpoint.mark_ready(facts)
    return "ready"


def validate_after_commit(checkpoint_id: int) -> None:
    transaction.on_commit(lambda: validate_checkpoint.delay(checkpoint_id))
