"""Metrics as production runs the control plane: uvicorn with two worker processes and a prefork
Celery worker, each with its own PROMETHEUS_MULTIPROC_DIR, on the test database and real Redis."""

import os
import subprocess
import sys
import uuid

import httpx
import pytest

from tests.platform.controlplane.e2e.stack import REPO, database_url
from tests.support.exposition import samples, value
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def scrape(url: str) -> dict:
    try:
        response = httpx.get(url, timeout=10)
    except httpx.HTTPError:
        return {}
    return samples(response.text) if response.status_code == 200 else {}


@pytest.fixture
def env(redis_broker_url, tmp_path):
    from django.db import connection

    return {
        **os.environ, "DATABASE_URL": database_url(connection.settings_dict),
        "CELERY_BROKER_URL": redis_broker_url, "CELERY_RESULT_BACKEND": redis_broker_url,
        "CHASSIS_VAR_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1",
    }  # fmt: skip


def start(argv, env, log_path, metrics_dir):
    metrics_dir.mkdir()
    log = open(log_path, "wb")
    return subprocess.Popen(
        argv, cwd=REPO, env={**env, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def stop(process):
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()


def test_two_web_processes_are_counted_together(env, tmp_path):
    port = free_port()
    web = start(
        [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--workers", "2", "--log-level", "warning"],
        env, tmp_path / "web.log", tmp_path / "web-metrics",
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: scrape(f"{base}/metrics"), "the control plane answers /metrics", timeout=120)
        for _ in range(20):  # spread over both processes by the kernel
            assert httpx.get(f"{base}/health", timeout=30).status_code == 200
        health = {"view": "health", "method": "GET", "status": "200"}
        name = "django_http_responses_total_by_status_view_method_total"
        for _ in range(3):  # whichever process answers the scrape, it reports both processes' counts
            assert value(scrape(f"{base}/metrics"), name, **health) == 20
        assert len(list((tmp_path / "web-metrics").glob("counter_*.db"))) == 2
    finally:
        stop(web)


def test_a_task_run_by_a_prefork_worker_shows_on_its_metrics_port(env, tmp_path):
    from controlplane.celery import app
    from controlplane.telemetry.tasks import health

    queue, port = f"metrics-{uuid.uuid4().hex[:8]}", free_port()
    worker = start(
        [sys.executable, "-m", "celery", "-A", "controlplane", "worker", "-Q", queue, "-n", f"{queue}@%h",
         "--pool", "prefork", "--concurrency", "2", "-l", "info", "--without-gossip", "--without-mingle"],
        {**env, "CHASSIS_WORKER_METRICS_PORT": str(port)}, tmp_path / "worker.log", tmp_path / "worker-metrics",
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_until(lambda: httpx_ok(url), "the worker serves /metrics", timeout=120)
        assert health.apply_async(queue=queue).get(timeout=60)["database"]["reachable"]
        failed = app.send_task("telemetry.health", args=["unexpected"], queue=queue)
        with pytest.raises(TypeError):
            failed.get(timeout=60)
        task = {"task": "telemetry.health"}
        scraped = wait_until(
            lambda: (
                (s := scrape(url)) and value(s, "chassis_celery_tasks_total", outcome="failed", **task) and s
            ),
            "the failed task counted",
        )
        assert value(scraped, "chassis_celery_tasks_total", outcome="succeeded", **task) == 1
        assert value(scraped, "chassis_celery_tasks_total", outcome="failed", **task) == 1
        assert value(scraped, "chassis_celery_task_duration_seconds_count", **task) == 2
        assert value(scraped, "chassis_celery_task_duration_seconds_sum", **task) > 0
        assert value(scraped, "django_db_execute_total") > 0  # the health task's query, by a pool process
    finally:
        stop(worker)


def httpx_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
