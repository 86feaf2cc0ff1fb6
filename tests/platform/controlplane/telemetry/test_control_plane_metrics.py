"""The control plane's /metrics: django-prometheus' figures after a request, Celery queue depth read
from the real Redis broker, and the benchmark verdict families, on one endpoint."""

import pytest

from tests.support.exposition import samples, value

pytestmark = pytest.mark.django_db


def test_a_request_and_a_waiting_task_show_on_metrics(client, make_node, redis_broker_url):
    from controlplane.celery import app

    node = make_node("qd-node", vendor="cpu", count=1)
    before = samples(client.get("/metrics").content.decode())
    assert client.get("/health").status_code == 200
    # A message for a node whose agent is not running waits in that node's queue.
    app.send_task("telemetry.health", queue=node.queue)
    try:
        response = client.get("/metrics")
        assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
        text = response.content.decode()
        after = samples(text)
    finally:
        with app.connection_for_write() as connection:
            connection.default_channel.queue_purge(node.queue)
    health = {"view": "health", "method": "GET"}
    name = "django_http_requests_total_by_view_transport_method_total"
    assert value(after, name, **health) == value(before, name, **health) + 1
    assert (
        value(after, "django_http_responses_total_by_status_view_method_total", status="200", **health) >= 1
    )
    assert value(after, "django_db_execute_total") > value(before, "django_db_execute_total")
    assert value(after, "chassis_celery_queue_length", queue=node.queue) == 1
    assert ("chassis_celery_queue_length", (("queue", "controlplane"),)) in after
    assert value(after, "chassis_celery_broker_up") == 1
    assert "# TYPE chassis_benchmark_regressed gauge" in text  # the verdicts are still served here


def test_metrics_answer_when_the_broker_does_not(client, monkeypatch):
    from controlplane.celery import app

    unreachable = app.connection_for_read
    monkeypatch.setattr(app, "connection_for_read", lambda: unreachable(url="redis://127.0.0.1:1/0"))
    response = client.get("/metrics")
    assert response.status_code == 200
    scraped = samples(response.content.decode())
    assert value(scraped, "chassis_celery_broker_up") == 0
    assert value(scraped, "django_http_requests_before_middlewares_total") >= 1
