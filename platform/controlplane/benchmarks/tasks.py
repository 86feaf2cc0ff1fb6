"""Celery entry points: each takes primary keys, reloads rows and delegates. Safe to run twice."""

from celery import shared_task

from controlplane.benchmarks import runner, scheduling


@shared_task(name="benchmarks.execute_run", acks_late=True)
def execute_run(run_id: int) -> str:
    """Runs on the default control-plane queue; a run that already left `queued` is skipped."""
    return runner.execute(run_id)


@shared_task(name="benchmarks.run_due_schedules")
def run_due_schedules() -> list[int]:
    """Celery beat, every minute: one run per due schedule slot."""
    return scheduling.run_due_schedules()
