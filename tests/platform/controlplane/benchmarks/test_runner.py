"""The run task end to end, in-process, against a real ``chassis serve`` replica that Deployment and
Replica rows point at (the Celery worker path is proven for other tasks; here the function runs)."""

import threading

import pytest
from controlplane.benchmarks.choices import RunState as S
from controlplane.benchmarks.models import BenchmarkRun
from controlplane.benchmarks.tasks import execute_run

from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db


def make_run(deployment, **fields) -> BenchmarkRun:
    values = dict(workload="chat-short", requests=6, concurrency=3, max_tokens=4, seed=3)
    return BenchmarkRun.objects.create(deployment=deployment, **{**values, **fields})


def test_run_goes_queued_running_succeeded_with_results(engine_replica, ready_replica_row):
    run = make_run(ready_replica_row(engine_replica.url))
    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.state == S.SUCCEEDED and run.reason == "finished"
    assert run.started_at <= run.finished_at and run.targets == [engine_replica.url]
    assert run.completed == 6 and run.failed_requests == 0
    r = run.results
    assert r["requests_ok"] == 6 and r["requests_failed"] == 0
    assert 0 < r["ttft_p50_ms"] <= r["ttft_p90_ms"] <= r["ttft_p99_ms"]
    assert 0 < r["itl_p50_ms"] <= r["itl_p99_ms"]
    assert r["output_tokens_per_s"] > 0 and r["requests_per_s"] > 0
    assert r["regressed"] is None  # a manual run has no schedule to compare with
    assert len(run.samples) == 6 and all(row[1] > 0 and row[3] for row in run.samples)
    assert execute_run(run.pk) == "skipped: run is succeeded"  # idempotent


def test_shared_prefix_run_measures_prefix_cache_hits(engine_replica, ready_replica_row):
    run = make_run(ready_replica_row(engine_replica.url), workload="shared-prefix", requests=8, concurrency=2)
    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.results["prefix_cache_hit_rate"] > 0


def test_no_ready_replica_fails_with_reason(make_deployment):
    run = make_run(make_deployment("empty"))
    assert execute_run(run.pk) == "failed"
    run.refresh_from_db()
    assert run.state == S.FAILED and "has no ready replica" in run.reason


def test_every_request_failing_fails_the_run_with_the_error(ready_replica_row):
    run = make_run(ready_replica_row(f"http://127.0.0.1:{free_port()}"), requests=2)
    assert execute_run(run.pk) == "failed"
    run.refresh_from_db()
    assert run.state == S.FAILED and run.reason.startswith("every request failed: ConnectError")
    assert run.results["requests_failed"] == 2


def test_gateway_url_setting_sends_requests_there(engine_replica, ready_replica_row, settings):
    """The replica itself stands in as the 'gateway': both speak the same OpenAI API."""
    settings.CHASSIS_GATEWAY_URL = engine_replica.url + "/"
    deployment = ready_replica_row(f"http://127.0.0.1:{free_port()}")  # the row's URL is dead
    run = make_run(deployment, requests=2)
    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.targets == [engine_replica.url] and run.results["requests_ok"] == 2


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_a_running_benchmark_between_requests(engine_replica, ready_replica_row, settings):
    from django.db import connection

    settings.CHASSIS_BENCHMARKS = {**settings.CHASSIS_BENCHMARKS, "PROGRESS_EVERY_S": 0.05}
    run = make_run(ready_replica_row(engine_replica.url), requests=400, concurrency=1, max_tokens=8)
    outcome = []

    def execute():
        try:
            outcome.append(execute_run(run.pk))
        finally:
            connection.close()

    worker = threading.Thread(target=execute)
    worker.start()
    wait_until(lambda: BenchmarkRun.objects.get(pk=run.pk).completed >= 3, "3 completed requests")
    BenchmarkRun.objects.get(pk=run.pk).cancel("test cancels")
    worker.join(60)
    run.refresh_from_db()
    assert outcome == ["cancelled"]
    assert run.state == S.CANCELLED and run.reason == "test cancels"
    assert 3 <= run.results["requests_ok"] < 400  # stopped early, and kept what it measured


def test_scheduled_run_much_slower_than_its_history_is_flagged(engine_replica, ready_replica_row):
    from controlplane.benchmarks.models import BenchmarkSchedule

    deployment = ready_replica_row(engine_replica.url)
    schedule = BenchmarkSchedule.objects.create(
        name="trend", deployment=deployment, requests=3, concurrency=1
    )
    for _ in range(3):  # an impossibly fast history: any real run is a regression against it
        past = make_run(deployment, schedule=schedule)
        past.start(["u"])
        past.succeed({"requests_ok": 1, "ttft_p50_ms": 0.001}, [])
    run = make_run(deployment, schedule=schedule, requests=3, concurrency=1)
    assert execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.results["regressed"] is True and run.results["baseline_ttft_p50_ms"] == 0.001
