"""Celery task outcomes and durations, counted where tasks run and served by the worker itself.

A task runs in a worker's pool process, never in the web process, so the worker exposes these on
its own port: ``CHASSIS_WORKER_METRICS_PORT`` (unset: not served), at ``/metrics``. With the
prefork pool, set ``PROMETHEUS_MULTIPROC_DIR`` for the worker too (its own directory, emptied at
start) so the pool processes' figures are summed; the thread and solo pools need nothing.

    chassis_celery_tasks_total{task, outcome}        outcome: succeeded, failed, retried, ...
    chassis_celery_task_duration_seconds{task}       from prerun to postrun, every outcome
"""

from __future__ import annotations

import logging
import os
import time

from celery.signals import task_postrun, task_prerun, worker_ready
from prometheus_client import Counter, Histogram, start_http_server

from controlplane.telemetry.exposition import process_registry

log = logging.getLogger(__name__)
PORT_ENV = "CHASSIS_WORKER_METRICS_PORT"
ADDRESS_ENV = "CHASSIS_WORKER_METRICS_ADDRESS"
OUTCOMES = {"SUCCESS": "succeeded", "FAILURE": "failed", "RETRY": "retried", "REJECTED": "rejected"}
# Tasks take from milliseconds (a reconcile pass) to minutes (a benchmark run, an engine launch).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)

TASKS = Counter(
    "chassis_celery_tasks", "Celery tasks finished, by task name and outcome", ["task", "outcome"]
)
DURATION = Histogram(
    "chassis_celery_task_duration_seconds", "Celery task run time, by task name", ["task"], buckets=BUCKETS
)
_started: dict[str, float] = {}


@task_prerun.connect
def _task_started(task_id=None, **_) -> None:
    _started[task_id] = time.monotonic()


@task_postrun.connect
def _task_finished(task_id=None, task=None, state=None, **_) -> None:
    began = _started.pop(task_id, None)
    name = getattr(task, "name", None) or "unknown"
    TASKS.labels(name, OUTCOMES.get(state, str(state).lower())).inc()
    if began is not None:
        DURATION.labels(name).observe(time.monotonic() - began)


@worker_ready.connect
def serve_worker_metrics(**_) -> None:
    port = os.environ.get(PORT_ENV, "").strip()
    if not port:
        return
    address = os.environ.get(ADDRESS_ENV, "127.0.0.1")
    try:
        start_http_server(int(port), addr=address, registry=process_registry())
    except OSError as exc:  # the worker still works; its metrics are just not served
        log.error("Celery task metrics: cannot serve on %s:%s: %s", address, port, exc)
        return
    log.info("Celery task metrics on http://%s:%s/metrics", address, port)
