"""Which prometheus_client registry a process exposes, aware of multi-process servers.

The control plane runs as several processes: uvicorn ``--workers N`` in production, and Celery's
prefork pool. Each has its own counters, and a scrape reaches only one of them, so with
``PROMETHEUS_MULTIPROC_DIR`` set (before the process starts: prometheus_client reads it when it is
imported) every process writes its values to files there and the exposition sums them over all
processes. The directory must be emptied whenever the server starts (systemd's RuntimeDirectory
does it; so does ``chassis up``), and each server needs its own.
"""

from __future__ import annotations

import os

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def process_registry() -> CollectorRegistry:
    """This server's metrics: every process's, summed, in multi-process mode; else this process's."""
    if not os.environ.get(MULTIPROC_ENV):
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


def exposition(*collectors) -> bytes:
    """The process registry's text format followed by ``collectors``' (read at scrape time)."""
    extra = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        extra.register(collector)
    return generate_latest(process_registry()) + generate_latest(extra)
