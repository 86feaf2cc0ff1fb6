"""Reachability checks for the services the control plane depends on."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from django.db import connection


@dataclass(frozen=True)
class ServiceCheck:
    reachable: bool
    backend: str
    latency_ms: float | None = None
    error: str | None = None

    def as_dict(self) -> dict:
        return {key: value for key, value in asdict(self).items() if value is not None}


def check_database() -> ServiceCheck:
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "not reachable"; say which
        return ServiceCheck(False, connection.vendor, error=f"{type(exc).__name__}: {exc}")
    return ServiceCheck(True, connection.vendor, latency_ms=round((time.perf_counter() - started) * 1e3, 2))


def check_broker(timeout: float = 2.0) -> ServiceCheck:
    from controlplane.celery import app

    started = time.perf_counter()
    transport = app.conf.broker_url.split("://", 1)[0]
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
            # A filesystem "connection" always succeeds; declare the default queue to touch it.
            conn.default_channel.queue_declare(app.conf.task_default_queue, passive=False)
    except Exception as exc:
        return ServiceCheck(False, transport, error=f"{type(exc).__name__}: {exc}")
    return ServiceCheck(True, transport, latency_ms=round((time.perf_counter() - started) * 1e3, 2))
