from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from controlplane.benchmarks.choices import Workload

MAX_REQUESTS = 100_000
MAX_CONCURRENCY = 512
MAX_TOKENS = 8192


class LoadParameters(models.Model):
    """What a benchmark sends: shared by runs and the schedules that create them."""

    workload = models.CharField(max_length=16, choices=Workload.choices, default=Workload.CHAT_SHORT)
    requests = models.PositiveIntegerField(
        default=64, validators=[MinValueValidator(1), MaxValueValidator(MAX_REQUESTS)]
    )
    concurrency = models.PositiveIntegerField(
        default=8,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_CONCURRENCY)],
        help_text="Requests in flight at once.",
    )
    max_tokens = models.PositiveIntegerField(
        default=64, validators=[MinValueValidator(1), MaxValueValidator(MAX_TOKENS)]
    )
    seed = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(2**31 - 1)],
        help_text="Same seed, same prompts.",
    )

    class Meta:
        abstract = True

    def clean(self) -> None:
        super().clean()
        if self.concurrency and self.requests and self.concurrency > self.requests:
            raise ValidationError({"concurrency": f"must not exceed requests ({self.requests})"})

    def load_parameters(self) -> dict:
        return {
            "workload": self.workload,
            "requests": self.requests,
            "concurrency": self.concurrency,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
        }
