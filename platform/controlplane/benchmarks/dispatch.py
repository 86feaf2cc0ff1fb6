"""Publishing benchmark tasks, always after the transaction that created the run commits."""

from __future__ import annotations

from django.db import transaction


def execute_after_commit(run_id: int) -> None:
    from controlplane.benchmarks.tasks import execute_run

    transaction.on_commit(lambda: execute_run.delay(run_id))
