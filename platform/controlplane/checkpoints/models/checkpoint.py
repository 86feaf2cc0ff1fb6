from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from controlplane.checkpoints.choices import CHECKPOINT_TRANSITIONS, CheckpointState
from engine.checkpoint.model_facts import device_memory_bytes

GIB = 2**30


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
    parameter_count = models.BigIntegerField(
        null=True, blank=True, help_text="Every parameter of the decoder (a DeepSeek-V3 MTP layer not counted)."
    )
    active_parameter_count = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Parameters one token's forward pass multiplies by: a mixture of experts' routed "
        "top-k, shared experts and dense parts, and the LM head; not the input embedding table.",
    )
    dtype = models.CharField(max_length=20, blank=True)
    size_bytes = models.BigIntegerField(null=True, blank=True)
    weight_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="The parameters in memory at the checkpoint's dtype."
    )
    digest = models.CharField(
        max_length=80, blank=True, help_text="sha256 over config, tokenizer and weight files."
    )
    kv_bytes_per_token = models.BigIntegerField(null=True, blank=True)
    max_context = models.PositiveIntegerField(null=True, blank=True)
    memory_per_replica_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="Weights plus the KV cache of one full-length sequence, on one device (tp=1)."
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

    @property
    def kv_tokens_per_gib(self) -> int | None:
        return GIB // self.kv_bytes_per_token if self.kv_bytes_per_token else None

    def memory_per_device_bytes(self, tp: int) -> int | None:
        """One device of a ``tp``-way replica: its share of the weights plus the KV cache of one
        ``max_context`` sequence. None when validation recorded no facts for ``tp`` (older rows)."""
        kv = self._kv_bytes_per_token_by_tp().get(str(tp))
        if kv is None or self.weight_bytes is None or self.max_context is None:
            return None
        return device_memory_bytes(self.weight_bytes, tp, kv, self.max_context)

    @property
    def memory_per_device_bytes_by_tp(self) -> dict[str, int]:
        """``memory_per_device_bytes`` at every tensor-parallel size validation recorded."""
        return {
            tp: memory
            for tp in self._kv_bytes_per_token_by_tp()
            if (memory := self.memory_per_device_bytes(int(tp))) is not None
        }

    def _kv_bytes_per_token_by_tp(self) -> dict[str, int]:
        # engine.checkpoint.model_facts.ModelFacts, as validation stored it (JSON: string keys)
        return self.details.get("facts", {}).get("kv_bytes_per_token_by_tp", {})

    def start_validation(self) -> None:
        self._move(CheckpointState.VALIDATING, reason="")

    def mark_ready(self, facts: dict) -> None:
        self._move(CheckpointState.READY, reason="", validated_at=timezone.now(), **facts)

    def mark_invalid(self, reason: str) -> None:
        self._move(CheckpointState.INVALID, reason=reason, validated_at=timezone.now())
