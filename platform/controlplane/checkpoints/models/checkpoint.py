from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from controlplane.checkpoints.choices import CHECKPOINT_TRANSITIONS, CheckpointState


class Checkpoint(models.Model):
    """Model weights on disk, registered by path; validated before anything may serve them."""

    name = models.SlugField(max_length=100)
    revision = models.CharField(max_length=100, default="main")
    path = models.CharField(
        max_length=1000,
        help_text="A Hugging Face directory (config.json, safetensors weights, tokenizer), "
        "or a GGUF file (or a directory holding one).",
    )
    state = models.CharField(
        max_length=16, choices=CheckpointState.choices, default=CheckpointState.REGISTERED
    )
    reason = models.TextField(blank=True, help_text="Why it is invalid.")
    architecture = models.CharField(max_length=100, blank=True)
    parameter_count = models.BigIntegerField(null=True, blank=True)
    dtype = models.CharField(max_length=20, blank=True)
    size_bytes = models.BigIntegerField(null=True, blank=True)
    digest = models.CharField(
        max_length=80, blank=True, help_text="sha256 over config, tokenizer and weight files."
    )
    kv_bytes_per_token = models.BigIntegerField(null=True, blank=True)
    max_context = models.PositiveIntegerField(null=True, blank=True)
    memory_per_replica_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="Weights plus the KV cache of one full-length sequence."
    )
    details = models.JSONField(default=dict, blank=True)
    validated_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "revision"]
        constraints = [
            models.UniqueConstraint(fields=["name", "revision"], name="unique_checkpoint_revision")
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.revision}"

    def _move(self, to: str, **fields) -> None:
        if to not in CHECKPOINT_TRANSITIONS[self.state]:
            raise ValidationError(f"checkpoint {self} cannot go from {self.state} to {to}")
        moved = Checkpoint.objects.filter(pk=self.pk, state=self.state).update(state=to, **fields)
        if not moved:
            raise ValidationError(f"checkpoint {self} changed state meanwhile")
        self.state = to
        for key, value in fields.items():
            setattr(self, key, value)

    def start_validation(self) -> None:
        self._move(CheckpointState.VALIDATING, reason="")

    def mark_ready(self, facts: dict) -> None:
        self._move(CheckpointState.READY, reason="", validated_at=timezone.now(), **facts)

    def mark_invalid(self, reason: str) -> None:
        self._move(CheckpointState.INVALID, reason=reason, validated_at=timezone.now())
