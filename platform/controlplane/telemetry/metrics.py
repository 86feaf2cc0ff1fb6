"""The control plane's /metrics, one endpoint for Prometheus:

- django-prometheus' request, response and database figures (``django_http_*``, ``django_db_*``) of
  every web process (see exposition.py for multi-process servers);
- Celery queue depth from the broker (queue_depth.py);
- each benchmark schedule's latest regression verdict (benchmarks/metrics.py).

Celery task outcomes and durations are counted in the workers and served by them
(celery_metrics.py), not here.
"""

from __future__ import annotations

from django.http import HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from controlplane.benchmarks.metrics import VerdictCollector
from controlplane.telemetry.exposition import exposition
from controlplane.telemetry.queue_depth import QueueDepthCollector


@require_GET
def metrics(request) -> HttpResponse:
    body = exposition(VerdictCollector(), QueueDepthCollector())
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
