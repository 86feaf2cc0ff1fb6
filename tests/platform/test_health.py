"""The control plane's /health endpoint and the services behind it."""

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_health_reports_database_and_broker_reachable(client):
    response = client.get("/health")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"]["reachable"] is True
    assert body["database"]["backend"] == connection.vendor
    assert body["broker"]["reachable"] is True


def test_health_is_503_when_broker_unreachable(client, monkeypatch):
    from controlplane.celery import app

    unreachable = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    # Celery reads CELERY_BROKER_URL from the environment ahead of its configuration.
    monkeypatch.setenv("CELERY_BROKER_URL", unreachable)
    previous = app.conf.broker_url
    app.conf.broker_url = unreachable
    try:
        response = client.get("/health")
    finally:
        app.conf.broker_url = previous
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "degraded"
    assert body["broker"]["reachable"] is False
    assert "Error" in body["broker"]["error"]


def test_health_rejects_post(client):
    assert client.post("/health").status_code == 405


def test_database_is_postgresql(require_postgres):
    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        (version,) = cursor.fetchone()
    assert connection.vendor == "postgresql"
    assert version.startswith("PostgreSQL")
