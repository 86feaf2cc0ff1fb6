"""Which schedules are due, and the one run each due slot gets."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.benchmarks.choices import ACTIVE_STATES, RunState
from controlplane.benchmarks.conf import setting
from controlplane.benchmarks.dispatch import execute_after_commit
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule, StaleRunState


def create_due_run(schedule: BenchmarkSchedule, now: datetime) -> BenchmarkRun | None:
    """The run for the schedule's current slot, unless that slot already has one.

    A slot whose time came while an earlier run of the schedule is still going is skipped: piling
    runs onto one deployment would measure the benchmark against itself.
    """
    slot = schedule.slot_at(now)
    if slot is None or not schedule.enabled or schedule.deployment_id is None:
        return None
    if BenchmarkRun.objects.filter(schedule=schedule, due_slot=slot).exists():
        return None
    if BenchmarkRun.objects.filter(schedule=schedule, state__in=ACTIVE_STATES).exists():
        return None
    try:
        with transaction.atomic():
            run = BenchmarkRun.objects.create(
                schedule=schedule,
                due_slot=slot,
                deployment=schedule.deployment,
                reason=f"scheduled by {schedule.name} for {slot:%Y-%m-%d %H:%M}",
                **schedule.load_parameters(),
            )
            execute_after_commit(run.pk)
    except IntegrityError:  # another beat tick filled this slot between our check and our insert
        return None
    return run


def fail_stale_runs(now: datetime) -> int:
    """Running benchmarks whose task stopped saving progress (its worker died) fail, so they neither
    stay `running` for ever nor hold back their schedule's next slots."""
    limit = float(setting("STALE_AFTER_S"))
    failed = 0
    for run in BenchmarkRun.objects.filter(
        state=RunState.RUNNING, heartbeat_at__lt=now - timedelta(seconds=limit)
    ):
        try:
            run.fail(f"no progress for {limit:g} s: the worker running it was lost")
            failed += 1
        except StaleRunState:
            continue
    return failed


def run_due_schedules(now: datetime | None = None) -> list[int]:
    now = now or timezone.now()
    fail_stale_runs(now)
    created = []
    for schedule in BenchmarkSchedule.objects.filter(
        enabled=True, starts_at__lte=now, deployment__isnull=False
    ).select_related("deployment"):
        run = create_due_run(schedule, now)
        if run is not None:
            created.append(run.pk)
    return created
