"""Benchmark operations the API and the UI share; each records who did it."""

from __future__ import annotations

from django.db import transaction

from controlplane.api import audit
from controlplane.benchmarks import conditions
from controlplane.benchmarks.dispatch import execute_after_commit
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule, StaleRunState
from controlplane.serving.models import Deployment


@transaction.atomic
def create_run(user, **fields) -> BenchmarkRun:
    run = BenchmarkRun.objects.create(created_by=user, reason="queued", **fields)
    audit.record(user, "create", run, fields)
    execute_after_commit(run.pk)
    return run


def reproduce_run(source: BenchmarkRun, deployment: Deployment, user) -> BenchmarkRun:
    """A new run of ``source``'s workload (seed and sweep included) on ``deployment``, holding the
    conditions diff as previewed now; the runner replaces it with the measured one when it starts."""
    changed = conditions.diff(source.conditions, conditions.preview(source, deployment))  # asks replicas
    with transaction.atomic():
        run = BenchmarkRun.objects.create(
            created_by=user,
            deployment=deployment,
            reproduced_from=source,
            sweep=source.sweep,
            conditions_diff=changed,
            reason=f"queued: reproduces #{source.pk}",
            **source.load_parameters(),
        )
        audit.record(user, "reproduce", run, {"source": source.pk, "deployment": deployment.name})
        execute_after_commit(run.pk)
    return run


@transaction.atomic
def cancel_run(run: BenchmarkRun, user) -> None:
    """Raises ValidationError for a run already finished; StaleRunState is retried once."""
    try:
        run.cancel(f"cancelled by {user.get_username()}")
    except StaleRunState:
        run.refresh_from_db()
        run.cancel(f"cancelled by {user.get_username()}")
    audit.record(user, "cancel", run)


@transaction.atomic
def set_schedule_enabled(schedule: BenchmarkSchedule, enabled: bool, user) -> None:
    schedule.set_enabled(enabled)
    audit.record(user, "enable" if enabled else "disable", schedule)
