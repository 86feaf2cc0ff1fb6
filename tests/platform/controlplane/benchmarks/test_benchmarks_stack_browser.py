"""Reproducible benchmarks through the UI, in chromium (Playwright), against the real worker, beat and
agent on PostgreSQL and Redis, with two real replicas: a run records its conditions; reproducing it on
a deployment with other engine options shows the conditions diff before it starts and the new run
keeps it; a sweep draws both charts; a scheduled run after a rolling update to max_num_seqs=1 is
flagged against the earlier ones; deleting a deployment keeps its runs, and its schedule stops but
stays listed. Every page is
drawn 1400 px wide without horizontal overflow (screenshots go to $CHASSIS_SCREENSHOT_DIR if set)."""

from datetime import timedelta

import pytest

from tests.platform.controlplane.e2e import conftest as e2e
from tests.support.browser import check_layout, chromium, log_in, make_user
from tests.support.waiting import wait_until

stack, operator_api = e2e.stack, e2e.operator_api  # the e2e fixtures: worker, beat, agent; an API token

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(400)]


@pytest.fixture
def page(monkeypatch, live_server):
    make_user("bench-op", "operator")
    with chromium(monkeypatch) as browser:
        yield log_in(browser, live_server.url, "bench-op", timeout_ms=30_000)


def ready_deployment(api, checkpoint_id: int, name: str, **fields):
    from controlplane.serving.models import Replica

    body = {"name": name, "checkpoint": checkpoint_id, "replicas": 1, "vendor": "cpu", **fields}
    response = api.post("/api/v1/deployments/", body, format="json")
    assert response.status_code == 201, response.json()
    pk = response.json()["id"]
    wait_until(lambda: Replica.objects.filter(deployment_id=pk, state="ready").exists(), f"{name} ready", timeout=150, poll=0.5)  # fmt: skip
    return pk


def wait_for_run_end(page, run_id: int) -> None:
    from controlplane.benchmarks.models import BenchmarkRun

    run = wait_until(lambda: (r := BenchmarkRun.objects.get(pk=run_id)).is_terminal and r, f"run {run_id} to end", timeout=120, poll=0.5)  # fmt: skip
    assert run.state == "succeeded", (run.state, run.reason)
    page.reload()
    page.locator("#run-state[data-state=succeeded]").wait_for()


def scheduled_run(schedule, slot: int):
    """Beat's work for the schedule's ``slot``-th slot (its clock stands in for the hours between),
    then the real worker runs it."""
    from controlplane.benchmarks.models import BenchmarkRun
    from controlplane.benchmarks.scheduling import run_due_schedules

    now = schedule.starts_at + timedelta(minutes=schedule.interval_minutes * slot, seconds=1)
    created = [
        pk for pk in run_due_schedules(now) if BenchmarkRun.objects.get(pk=pk).schedule_id == schedule.pk
    ]
    assert len(created) == 1
    run = wait_until(lambda: (r := BenchmarkRun.objects.get(pk=created[0])).is_terminal and r, f"scheduled run {created[0]}", timeout=120, poll=0.5)  # fmt: skip
    assert run.state == "succeeded", (run.state, run.reason)
    return run


def rolled_out(deployment_id: int, number: int) -> bool:
    from controlplane.serving.models import Replica

    replicas = Replica.objects.filter(deployment_id=deployment_id).exclude(state="stopped")
    return bool(replicas) and all(
        r.state == "ready" and r.revision and r.revision.number == number for r in replicas
    )


def test_reproduce_with_diff_and_history_outlives_its_deployment(
    stack, operator_api, live_server, page, tiny_model_dir
):
    from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule
    from controlplane.checkpoints.models import Checkpoint
    from controlplane.fleet.models import Node
    from controlplane.serving.models import Replica
    from django.utils import timezone

    # Two shared CPU cores: only a slowdown past 60 % of the median counts (the slowed revision's is larger).
    stack.env["CHASSIS_BENCHMARK_REGRESSION_MIN_PCT"] = "60"
    stack.start_all()
    try:
        wait_until(
            lambda: Node.objects.filter(name=stack.node, state="up").exists(),
            "the agent to register",
            timeout=120,  # the agent's first heartbeat can wait on a loaded 2-core machine
            poll=0.5,
        )
        response = operator_api.post(
            "/api/v1/checkpoints/", {"name": "tiny", "path": str(tiny_model_dir)}, format="json"
        )
        checkpoint_id = response.json()["id"]
        wait_until(
            lambda: Checkpoint.objects.get(pk=checkpoint_id).state == "ready",
            "validation",
            timeout=60,
            poll=0.5,
        )
        alpha = ready_deployment(operator_api, checkpoint_id, "alpha")
        ready_deployment(operator_api, checkpoint_id, "beta", engine_options={"max_num_seqs": 1})

        # A run on alpha, from the UI form; the worker runs it and records its conditions.
        page.goto(f"{live_server.url}/benchmarks/")
        page.select_option("#id_deployment", label="alpha")
        page.fill("#id_requests", "4")
        page.fill("#id_concurrency", "2")
        page.fill("#id_max_tokens", "4")
        page.click("#create-run button[type=submit]")
        page.wait_for_url("**/benchmarks/*/")
        source_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        wait_for_run_end(page, source_id)
        page.click("#conditions summary")
        conditions = page.locator("#conditions").inner_text()
        assert "engine_config.max_num_seqs" in conditions and "versions.torch" in conditions
        check_layout(page, "run-detail")

        # A 3 x 2 x 2 sweep on alpha, from the same form: both sweep charts draw its 12 points.
        page.goto(f"{live_server.url}/benchmarks/")
        page.select_option("#id_deployment", label="alpha")
        page.fill("#id_requests", "4")
        page.fill("#id_concurrency", "1")
        page.fill("#id_max_tokens", "4")
        page.fill("#id_sweep_concurrency", "1,2,4")
        page.fill("#id_sweep_input_tokens", "16,64")
        page.fill("#id_sweep_output_tokens", "4,12")
        page.click("#create-run button[type=submit]")
        page.wait_for_url("**/benchmarks/*/")
        sweep_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        wait_for_run_end(page, sweep_id)
        page.wait_for_selector("#chart-prefill[data-points='12'] canvas")
        page.wait_for_selector("#chart-decode[data-points='12'] canvas")
        assert f"#{sweep_id} alpha Pareto front" in page.locator("#chart-decode .u-legend").inner_text()
        check_layout(page, "run-sweep")
        page.goto(f"{live_server.url}/benchmarks/{source_id}/")

        # Reproduce on beta: the diff first, nothing started; then start it.
        page.select_option("#reproduce-form #id_deployment", "beta")
        page.click("#reproduce-form button[type=submit]")
        page.wait_for_url("**/reproduce/?deployment=beta")
        diff = page.locator("#conditions-diff")
        assert diff.locator("tr[data-key='engine_config.max_num_seqs'] td").nth(1).inner_text() == "1"
        assert diff.locator("tr[data-key='deployment.name']").count() == 1
        assert BenchmarkRun.objects.count() == 2  # the run and the sweep; no reproduction yet
        check_layout(page, "reproduce-preview")
        page.click("#start-reproduction button")
        page.wait_for_url("**/benchmarks/*/")
        copy_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        wait_for_run_end(page, copy_id)
        copy = BenchmarkRun.objects.get(pk=copy_id)
        assert (
            copy.reproduced_from_id == source_id and copy.seed == BenchmarkRun.objects.get(pk=source_id).seed
        )
        stored = {c["key"]: c for c in copy.conditions_diff}
        assert (
            stored["engine_config.max_num_seqs"]["after"] == 1
            and stored["deployment.name"]["after"] == "beta"
        )
        assert page.locator("#conditions-diff tr[data-key='engine_config.max_num_seqs']").count() == 1
        check_layout(page, "run-reproduction")

        # Scheduled runs judge alpha against its history: four runs, then a rolling update to
        # max_num_seqs=1 (a deliberately slowed revision), then the next scheduled run is flagged.
        trend = BenchmarkSchedule.objects.create(
            name="alpha-trend", deployment_id=alpha, interval_minutes=60, requests=16, concurrency=8,
            max_tokens=16, starts_at=timezone.now() + timedelta(days=1),  # beat leaves it to us
        )  # fmt: skip
        history = [scheduled_run(trend, slot) for slot in range(4)]
        assert [run.results["regressed"] for run in history[:3]] == [None] * 3
        slowed = {"engine_options": {"max_num_seqs": 1}}
        assert operator_api.patch(f"/api/v1/deployments/{alpha}/", slowed, format="json").status_code == 200
        wait_until(lambda: rolled_out(alpha, 2), "alpha's rolling update to revision 2", timeout=180, poll=0.5)  # fmt: skip
        flagged = scheduled_run(trend, 4)
        regression = flagged.results["regression"]
        assert flagged.results["regressed"] is True and "ttft_p50_ms" in regression["regressed_metrics"], (
            regression
        )
        changed = {c["key"]: c for c in regression["changed_conditions"]}
        assert changed["engine_config.max_num_seqs"]["after"] == 1 and changed["revisions"]["after"] == [2]
        page.goto(f"{live_server.url}/benchmarks/{flagged.pk}/")
        assert "regressed" in page.locator("#judged-ttft_p50_ms").inner_text()
        assert page.locator("#changed-since-baseline tr[data-key='engine_config.max_num_seqs']").count() == 1
        page.wait_for_selector("#chart-timeline[data-points='16'] canvas")
        check_layout(page, "run-regressed")
        page.goto(f"{live_server.url}/benchmarks/schedules/{trend.pk}/")
        page.wait_for_selector("#chart-ttft[data-points='5'] canvas")
        check_layout(page, "schedule-trend")

        # A schedule on alpha, then alpha goes: its runs and the schedule stay, the schedule stops.
        page.goto(f"{live_server.url}/benchmarks/schedules/")
        page.fill("#id_name", "alpha-nightly")
        page.select_option("#create-schedule #id_deployment", label="alpha")
        page.fill("#id_interval_minutes", "1440")
        page.click("#create-schedule button[type=submit]")
        page.wait_for_url("**/benchmarks/schedules/*/")
        schedule = BenchmarkSchedule.objects.get(name="alpha-nightly")
        assert (
            operator_api.post(
                f"/api/v1/deployments/{alpha}/scale/", {"replicas": 0}, format="json"
            ).status_code
            == 202
        )
        wait_until(lambda: not Replica.objects.filter(deployment_id=alpha).exclude(state="stopped").exists(), "alpha stopped", timeout=60, poll=0.5)  # fmt: skip
        assert operator_api.delete(f"/api/v1/deployments/{alpha}/").status_code == 204
        page.reload()
        page.locator("#deployment-deleted").wait_for()
        assert (
            "disabled" in page.locator("main").inner_text() and page.locator("#toggle-schedule").count() == 0
        )
        check_layout(page, "schedule-deleted-deployment")
        page.goto(f"{live_server.url}/benchmarks/")
        assert "alpha (deleted)" in page.locator(f"#run-{source_id}").inner_text()
        assert page.locator(f"#run-{copy_id}").count() == 1
        check_layout(page, "runs")
        page.goto(f"{live_server.url}/benchmarks/{source_id}/")
        assert "(deleted)" in page.locator("main p").first.inner_text()
        schedule.refresh_from_db()
        assert schedule.enabled is False and schedule.deployment_id is None
    except BaseException:
        print(stack.logs())
        raise
