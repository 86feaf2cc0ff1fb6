from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from controlplane.benchmarks.choices import RUN_TRANSITIONS, TERMINAL_STATES, RunState
from controlplane.benchmarks.models.parameters import LoadParameters, sweep_size


class StaleRunState(Exception):
    """The run was not in the state the caller expected: someone else moved it first."""


class BenchmarkRun(LoadParameters):
    """One load test against a deployment's ready replicas. State changes only through the methods."""

    # History outlives its deployment: a deleted deployment leaves its runs with the name they ran on.
    deployment = models.ForeignKey(
        "serving.Deployment", null=True, on_delete=models.SET_NULL, related_name="benchmark_runs"
    )
    deployment_name = models.CharField(max_length=100, blank=True, editable=False)
    schedule = models.ForeignKey(
        "benchmarks.BenchmarkSchedule",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="runs",
    )
    due_slot = models.DateTimeField(
        null=True, blank=True, help_text="The schedule slot this run fills (none for manual runs)."
    )
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.QUEUED)
    reason = models.TextField(blank=True, help_text="Why it is in its state.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="Last progress save of the task running it."
    )
    targets = models.JSONField(default=list, blank=True, help_text="Base URLs the requests went to.")
    completed = models.PositiveIntegerField(default=0, help_text="Requests finished so far.")
    failed_requests = models.PositiveIntegerField(default=0)
    results = models.JSONField(default=dict, blank=True)
    samples = models.JSONField(
        default=list, blank=True, help_text="Per-request [start s, TTFT ms, ITL ms, ok], bounded."
    )
    sweep = models.JSONField(
        default=dict,
        blank=True,
        help_text='A grid run once per point: {"concurrency": [...], "input_tokens": [...], '
        '"output_tokens": [...]}; empty for a single load.',
    )
    conditions = models.JSONField(
        default=dict, blank=True, help_text="Everything it ran on, recorded once when it starts."
    )
    reproduced_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reproductions"
    )
    conditions_diff = models.JSONField(
        default=list,
        blank=True,
        help_text="A reproduction's conditions that differ from the run it reproduces: "
        "[{key, before, after}], shown before it starts and replaced by the measured ones when it does.",
    )

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            # A schedule's slot is filled at most once, however many beat ticks race for it.
            models.UniqueConstraint(fields=["schedule", "due_slot"], name="unique_benchmark_slot")
        ]

    def __str__(self) -> str:
        return f"benchmark #{self.pk} {self.workload} on {self.deployment_name or self.deployment}"

    def save(self, *args, **kwargs):
        if self.deployment is not None and not self.deployment_name:
            self.deployment_name = self.deployment.name
        super().save(*args, **kwargs)

    @property
    def is_sweep(self) -> bool:
        return bool(self.sweep)

    @property
    def total_requests(self) -> int:
        """Requests over the whole run: ``requests`` per sweep point."""
        return self.requests * sweep_size(self.sweep)

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def progress_pct(self) -> int:
        total = self.total_requests
        return int(100 * self.completed / total) if total else 0

    # --- the one way to change state ------------------------------------------------------------
    def _move(self, to: str, reason: str, **fields) -> None:
        origin = self.state
        if to not in RUN_TRANSITIONS[origin]:
            raise ValidationError({"state": [f"{self} is {origin}; it cannot become {to}"]})
        values = {"state": to, "reason": reason, **fields}
        if not BenchmarkRun.objects.filter(pk=self.pk, state=origin).update(**values):
            current = BenchmarkRun.objects.filter(pk=self.pk).values_list("state", flat=True).first()
            raise StaleRunState(f"{self} is {current}, not {origin}")
        for key, value in values.items():
            setattr(self, key, value)

    def start(
        self, targets: list[str], conditions: dict | None = None, conditions_diff: list | None = None
    ) -> None:
        """Conditions are recorded here, once: a run never changes what it says it ran on."""
        extra = {} if conditions is None else {"conditions": conditions}
        if conditions_diff is not None:
            extra["conditions_diff"] = conditions_diff
        self._move(
            RunState.RUNNING,
            f"sending {self.total_requests} requests to {len(targets)} target(s)",
            targets=targets,
            **extra,
            started_at=timezone.now(),
            heartbeat_at=timezone.now(),
        )

    def succeed(self, results: dict, samples: list, reason: str = "") -> None:
        self._move(
            RunState.SUCCEEDED,
            reason or "finished",
            results=results,
            samples=samples,
            completed=results.get("requests_ok", 0) + results.get("requests_failed", 0),
            failed_requests=results.get("requests_failed", 0),
            finished_at=timezone.now(),
        )

    def fail(self, reason: str, results: dict | None = None, samples: list | None = None) -> None:
        extra = {} if results is None else {"results": results, "samples": samples or []}
        self._move(RunState.FAILED, reason, finished_at=timezone.now(), **extra)

    def cancel(self, reason: str) -> None:
        """Queued runs never start; a running one stops before its next request."""
        self._move(RunState.CANCELLED, reason, finished_at=timezone.now())

    def record_progress(self, completed: int, failed: int) -> None:
        """Not a transition: the counters the UI polls while the run is going."""
        now = timezone.now()
        BenchmarkRun.objects.filter(pk=self.pk, state=RunState.RUNNING).update(
            completed=completed, failed_requests=failed, heartbeat_at=now
        )
        self.completed, self.failed_requests, self.heartbeat_at = completed, failed, now

    def attach_partial_results(self, results: dict, samples: list) -> None:
        """What a cancelled run measured before it stopped (its state stays cancelled)."""
        BenchmarkRun.objects.filter(pk=self.pk, state=RunState.CANCELLED).update(
            results=results, samples=samples
        )
        self.results, self.samples = results, samples

    def current_state(self) -> str:
        return BenchmarkRun.objects.filter(pk=self.pk).values_list("state", flat=True).first() or ""
