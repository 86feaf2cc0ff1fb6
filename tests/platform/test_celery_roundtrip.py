"""A task makes a real round trip through a real Celery worker process over Redis."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _database_url_of_this_test_run() -> str | None:
    """The worker must reach the database this test run created (pytest-django's test_<name>)."""
    from django.db import connection

    db = connection.settings_dict
    if connection.vendor != "postgresql":
        return os.environ.get("DATABASE_URL")
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        (name,) = cursor.fetchone()
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{name}"


@pytest.fixture
def worker_queue(redis_broker_url, transactional_db):
    queue = f"roundtrip-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "CELERY_BROKER_URL": redis_broker_url, "PYTHONUNBUFFERED": "1"}
    database_url = _database_url_of_this_test_run()
    if database_url:
        env["DATABASE_URL"] = database_url
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "worker",
            "-Q",
            queue,
            "-n",
            f"{queue}@%h",
            "--pool",
            "solo",
            "-l",
            "warning",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield queue
    worker.terminate()
    try:
        worker.wait(20)
    except subprocess.TimeoutExpired:
        worker.kill()


def test_health_task_round_trip_through_worker(worker_queue, redis_broker_url):
    from controlplane.celery import app
    from controlplane.telemetry.tasks import health

    assert app.conf.broker_url.startswith("redis://")
    result = health.apply_async(queue=worker_queue).get(timeout=60)
    assert result["pid"] != os.getpid()  # ran in the worker process, not here
    assert result["database"]["reachable"] is True, result


def test_worker_answers_ping(worker_queue):
    from controlplane.celery import app

    replies = []
    for _ in range(30):
        replies = app.control.ping(destination=[f"{worker_queue}@{os.uname().nodename}"], timeout=1.0)
        if replies:
            break
    assert replies, "worker never answered a ping"
    ((name, reply),) = replies[0].items()
    assert reply == {"ok": "pong"}
