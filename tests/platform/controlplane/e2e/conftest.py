import pytest

from tests.platform.controlplane.e2e.stack import Stack, database_url
from tests.support.browser import chromium


@pytest.fixture
def stack(require_postgres, redis_broker_url, transactional_db, tmp_path, settings):
    """Worker, beat and agent on the test database; every engine they started is stopped after."""
    from controlplane.celery import app
    from controlplane.serving import launcher
    from controlplane.serving.models import Replica
    from django.db import connection

    parts = Stack(tmp_path, database_url(connection.settings_dict), redis_broker_url)
    previous_queue = app.conf.task_default_queue
    app.conf.task_default_queue = parts.queue  # what this process publishes goes to the stack's worker
    settings.CELERY_TASK_DEFAULT_QUEUE = parts.queue
    try:
        yield parts
    finally:
        parts.stop_all()
        app.conf.task_default_queue = previous_queue
        ours = {str(uid) for uid in Replica.objects.values_list("uid", flat=True)}
        for replica_id, engine in launcher.running_engines().items():
            if replica_id in ours:
                launcher.stop_process(engine.pid, 5)


@pytest.fixture
def operator_api(db):
    from io import StringIO

    from django.core.management import call_command
    from rest_framework.test import APIClient

    out = StringIO()
    call_command("create_api_token", "e2e-operator", "--role", "operator", stdout=out)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().strip()}")
    return client


@pytest.fixture
def browser(monkeypatch):
    """Debian's chromium through Playwright (tests/support/browser.py)."""
    with chromium(monkeypatch) as launched:
        yield launched
