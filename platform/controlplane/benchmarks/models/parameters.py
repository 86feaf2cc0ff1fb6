from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from controlplane.benchmarks.choices import Workload

MAX_REQUESTS = 100_000
MAX_CONCURRENCY = 512
MAX_TOKENS = 8192
MAX_INPUT_TOKENS = 32768
MAX_SWEEP_POINTS = 64
SWEEP_AXES = {"concurrency": MAX_CONCURRENCY, "input_tokens": MAX_INPUT_TOKENS, "output_tokens": MAX_TOKENS}


def sweep_size(sweep: dict) -> int:
    """Points in a sweep grid (1 for no sweep)."""
    size = 1
    for axis in SWEEP_AXES:
        size *= len(sweep.get(axis) or [None])
    return size


def sweep_errors(sweep: object) -> list[str]:
    """Why a sweep grid is refused; empty when it is good (an empty grid means no sweep)."""
    if sweep in (None, {}):
        return []
    if not isinstance(sweep, dict):
        return ['must be an object {"concurrency": [...], "input_tokens": [...], "output_tokens": [...]}']
    errors = [f"unknown axis {name!r}" for name in sweep if name not in SWEEP_AXES]
    for axis, limit in SWEEP_AXES.items():
        values = sweep.get(axis)
        if not isinstance(values, list) or not values:
            errors.append(f"{axis} must be a non-empty list of integers")
        elif not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= limit for v in values):
            errors.append(f"{axis} values must be integers from 1 to {limit}")
        elif len(set(values)) != len(values):
            errors.append(f"{axis} has repeated values")
    if not errors and sweep_size(sweep) > MAX_SWEEP_POINTS:
        errors.append(f"{sweep_size(sweep)} points; at most {MAX_SWEEP_POINTS}")
    return errors


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
