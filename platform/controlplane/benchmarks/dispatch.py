"""Publishing benchmark tasks, always after the transaction that created the run commits.

Tasks are named, not imported: ``tasks`` calls the services that call this module, so importing
it here would close a circle. A signature resolves the registered task by name when it is sent
(so eager mode still runs it in place) and falls back to sending by name.
"""

from __future__ import annotations

from celery import current_app
from django.db import transaction

EXECUTE_RUN = "benchmarks.execute_run"


def execute_after_commit(run_id: int) -> None:
    transaction.on_commit(lambda: current_app.signature(EXECUTE_RUN, args=[run_id]).apply_async())
