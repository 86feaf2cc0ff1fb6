"""Schedule slots, one run per due slot whatever the number of beat ticks, and the regression flag."""

from datetime import timedelta

import pytest
from controlplane.benchmarks.choices import RunState as S
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule
from controlplane.benchmarks.regression import verdict
from controlplane.benchmarks.scheduling import run_due_schedules
from django.db import IntegrityError, transaction
from django.utils import timezone

pytestmark = pytest.mark.django_db
T0 = timezone.now().replace(microsecond=0) - timedelta(days=1)


@pytest.fixture
def schedule(make_deployment):
    return BenchmarkSchedule.objects.create(
        name="nightly", deployment=make_deployment(), interval_minutes=10, starts_at=T0,
        workload="shared-prefix", requests=12, concurrency=3, max_tokens=16, seed=5,
    )  # fmt: skip


def test_slots(schedule):
    assert schedule.slot_at(T0 - timedelta(seconds=1)) is None
    assert schedule.slot_at(T0) == T0
    assert schedule.slot_at(T0 + timedelta(minutes=19, seconds=59)) == T0 + timedelta(minutes=10)
    assert schedule.next_slot(T0 + timedelta(minutes=25)) == T0 + timedelta(minutes=30)


def test_two_ticks_in_one_slot_create_one_run(schedule):
    now = T0 + timedelta(minutes=21)
    created = run_due_schedules(now)
    assert len(created) == 1 and run_due_schedules(now + timedelta(seconds=30)) == []
    run = BenchmarkRun.objects.get(pk=created[0])
    assert run.schedule == schedule and run.due_slot == T0 + timedelta(minutes=20) and run.state == S.QUEUED
    assert run.load_parameters() == schedule.load_parameters()
    # The database refuses a second run for the slot even if two ticks race past the check.
    with pytest.raises(IntegrityError), transaction.atomic():
        BenchmarkRun.objects.create(schedule=schedule, due_slot=run.due_slot, deployment=schedule.deployment)


def test_next_slot_waits_for_the_active_run_and_disabled_schedules_create_none(schedule):
    first = run_due_schedules(T0 + timedelta(minutes=1))
    assert run_due_schedules(T0 + timedelta(minutes=11)) == []  # the first run is still queued
    run = BenchmarkRun.objects.get(pk=first[0])
    run.start(["u"])
    run.succeed({"requests_ok": 1, "ttft_p50_ms": 10.0}, [])
    second = run_due_schedules(T0 + timedelta(minutes=12))
    assert len(second) == 1 and BenchmarkRun.objects.get(pk=second[0]).due_slot == T0 + timedelta(minutes=10)
    BenchmarkRun.objects.get(pk=second[0]).cancel("test")
    schedule.set_enabled(False)
    assert run_due_schedules(T0 + timedelta(minutes=25)) == []


def finished_run(schedule, ttft_p50_ms, state=S.SUCCEEDED) -> BenchmarkRun:
    run = BenchmarkRun.objects.create(schedule=schedule, deployment=schedule.deployment)
    run.start(["u"])
    if state == S.SUCCEEDED:
        run.succeed({"requests_ok": 1, "ttft_p50_ms": ttft_p50_ms}, [])
    else:
        run.fail("test")
    return run


def test_regression_against_median_and_mad_of_the_last_five_successes(schedule, settings):
    finished_run(schedule, 500.0)  # older than the window of 5: ignored
    for value in (100.0, 110.0, 90.0, 105.0, 95.0):
        finished_run(schedule, value)
    finished_run(schedule, None, state=S.FAILED)  # failed runs are not part of the baseline
    current = BenchmarkRun.objects.create(schedule=schedule, deployment=schedule.deployment)
    # median 100, MAD 5: the band is 3 × 1.4826 × 5 = 22.2 ms above the median
    judged = verdict(current, {"ttft_p50_ms": 125.0})
    assert judged["regressed"] is True and judged["baseline_ttft_p50_ms"] == 100.0
    ttft = judged["regression"]["metrics"]["ttft_p50_ms"]
    assert (ttft["median"], ttft["mad"], ttft["limit"]) == (100.0, 5.0, 122.239)
    assert judged["regression"]["regressed_metrics"] == ["ttft_p50_ms"]
    assert len(judged["regression"]["baseline_runs"]) == 5
    assert verdict(current, {"ttft_p50_ms": 119.0})["regressed"] is False
    settings.CHASSIS_BENCHMARKS = {**settings.CHASSIS_BENCHMARKS, "REGRESSION_K": 6.0}
    assert verdict(current, {"ttft_p50_ms": 125.0})["regressed"] is False


def test_throughput_regresses_downwards_and_a_steady_history_has_a_floor(schedule):
    for _ in range(3):
        run = BenchmarkRun.objects.create(schedule=schedule, deployment=schedule.deployment)
        run.start(["u"])
        run.succeed({"requests_ok": 1, "output_tokens_per_s": 200.0, "prefix_cache_hit_rate": 0.5}, [])
    current = BenchmarkRun.objects.create(schedule=schedule, deployment=schedule.deployment)
    # MAD 0: the 10 % floor decides; faster is never a regression
    assert verdict(current, {"output_tokens_per_s": 185.0})["regressed"] is False
    assert verdict(current, {"output_tokens_per_s": 900.0})["regressed"] is False
    slow = verdict(current, {"output_tokens_per_s": 150.0, "prefix_cache_hit_rate": 0.1})
    assert slow["regression"]["regressed_metrics"] == ["output_tokens_per_s", "prefix_cache_hit_rate"]


def test_no_baseline_means_no_verdict(schedule, make_deployment):
    first = BenchmarkRun.objects.create(schedule=schedule, deployment=schedule.deployment)
    assert verdict(first, {"ttft_p50_ms": 50.0})["regressed"] is None
    for value in (10.0, 11.0):
        finished_run(schedule, value)
    third = BenchmarkRun.objects.create(schedule=schedule, deployment=schedule.deployment)
    assert verdict(third, {"ttft_p50_ms": 50.0})["regressed"] is None  # two runs are no spread to judge by
    manual = BenchmarkRun.objects.create(deployment=schedule.deployment)
    assert verdict(manual, {"ttft_p50_ms": 50.0}) == {
        "regressed": None,
        "baseline_ttft_p50_ms": None,
        "regression": None,
    }


@pytest.mark.django_db(transaction=True)
def test_racing_beat_ticks_fill_a_slot_once(require_postgres, schedule):
    """Several ticks at the same moment, each on its own connection: the unique slot holds."""
    import threading

    from django.db import connection

    now = T0 + timedelta(minutes=35)
    barrier = threading.Barrier(4)
    created = []

    def tick():
        try:
            barrier.wait(10)
            created.extend(run_due_schedules(now))
        finally:
            connection.close()

    threads = [threading.Thread(target=tick) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(created) == 1
    assert BenchmarkRun.objects.filter(schedule=schedule).count() == 1


def test_a_running_run_without_progress_is_failed_and_frees_its_schedule(schedule):
    first = BenchmarkRun.objects.get(pk=run_due_schedules(T0 + timedelta(minutes=1))[0])
    first.start(["u"])
    BenchmarkRun.objects.filter(pk=first.pk).update(heartbeat_at=T0 + timedelta(minutes=1))
    # 10 minutes later: no progress save for far longer than STALE_AFTER_S
    created = run_due_schedules(T0 + timedelta(minutes=11))
    first.refresh_from_db()
    assert first.state == S.FAILED and "the worker running it was lost" in first.reason
    assert len(created) == 1  # the schedule goes on
