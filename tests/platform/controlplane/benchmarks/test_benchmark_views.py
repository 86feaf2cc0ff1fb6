"""The benchmark pages through Django's test client: role gating, inline errors, live part, chart data."""

import pytest
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule

pytestmark = pytest.mark.django_db


@pytest.fixture
def objects(make_deployment):
    deployment = make_deployment()
    schedule = BenchmarkSchedule.objects.create(name="hourly", deployment=deployment, interval_minutes=60)
    running = BenchmarkRun.objects.create(deployment=deployment, requests=10, concurrency=2)
    running.start(["http://127.0.0.1:8100"])
    running.record_progress(4, 1)
    done = BenchmarkRun.objects.create(deployment=deployment, schedule=schedule)
    done.start(["http://127.0.0.1:8100"])
    done.succeed(
        {"requests_ok": 2, "requests_failed": 0, "ttft_p50_ms": 12.5, "output_tokens_per_s": 80.0,
         "prefix_cache_hit_rate": 0.5, "regressed": True, "baseline_ttft_p50_ms": 9.0, "errors": {}},
        [[0.0, 12.0, 2.0, True], [0.1, 13.0, 2.5, True], [0.2, None, None, False]],
    )  # fmt: skip
    return {"schedule": schedule, "running": running, "done": done}


def pages(objects):
    return [
        "/benchmarks/",
        f"/benchmarks/{objects['running'].pk}/",
        f"/benchmarks/{objects['done'].pk}/",
        "/benchmarks/schedules/",
        f"/benchmarks/schedules/{objects['schedule'].pk}/",
    ]


def test_viewer_reads_everything_but_sees_no_actions(login, objects):
    client = login("viewer")
    for url in pages(objects):
        response = client.get(url)
        assert response.status_code == 200, url
        page = response.content.decode()
        assert '<button type="submit">' not in page.replace('<button type="submit">Log out', ""), url
    assert client.post("/benchmarks/new/", {}).status_code == 403
    assert client.post(f"/benchmarks/{objects['running'].pk}/cancel/").status_code == 403
    assert client.post("/benchmarks/schedules/new/", {}).status_code == 403
    assert client.post(f"/benchmarks/schedules/{objects['schedule'].pk}/toggle/").status_code == 403


def test_operator_sees_actions_and_cancels(login, objects):
    client = login("operator")
    running = client.get(f"/benchmarks/{objects['running'].pk}/").content.decode()
    assert "Cancel</button>" in running and "4 / 10 requests (40 %), 1 failed" in running
    assert 'hx-get="/benchmarks/' in running  # the live part polls while the run goes
    assert "Cancel</button>" not in client.get(f"/benchmarks/{objects['done'].pk}/").content.decode()
    assert "Start benchmark</button>" in client.get("/benchmarks/").content.decode()
    schedule_page = client.get(f"/benchmarks/schedules/{objects['schedule'].pk}/").content.decode()
    assert "Disable</button>" in schedule_page and f"#{objects['done'].pk}" in schedule_page
    response = client.post(f"/benchmarks/{objects['running'].pk}/cancel/")
    assert response.status_code == 302
    objects["running"].refresh_from_db()
    assert objects["running"].state == "cancelled" and objects["running"].reason == "cancelled by operator-ui"


def test_create_forms_show_errors_inline_and_create(login, make_deployment):
    deployment = make_deployment("target")
    client = login("operator")
    response = client.post(
        "/benchmarks/new/",
        {"deployment": deployment.pk, "workload": "chat-short", "requests": 2, "concurrency": 5, "max_tokens": 8, "seed": 0},
    )  # fmt: skip
    assert response.status_code == 400
    assert (
        'id="error-concurrency"' in response.content.decode()
        and "must not exceed requests (2)" in response.content.decode()
    )
    response = client.post(
        "/benchmarks/new/",
        {"deployment": deployment.pk, "workload": "multi-turn", "requests": 6, "concurrency": 2, "max_tokens": 8, "seed": 1},
    )  # fmt: skip
    run = BenchmarkRun.objects.get(deployment=deployment)
    assert response.status_code == 302 and response["Location"] == f"/benchmarks/{run.pk}/"
    assert run.created_by.username == "operator-ui" and run.workload == "multi-turn"
    bad = client.post("/benchmarks/schedules/new/", {"name": "bad name!", "deployment": deployment.pk})
    assert bad.status_code == 400 and 'id="error-name"' in bad.content.decode()
    good = client.post(
        "/benchmarks/schedules/new/",
        {"name": "daily", "deployment": deployment.pk, "workload": "chat-short", "requests": 4, "concurrency": 2,
         "max_tokens": 8, "seed": 0, "interval_minutes": 1440, "enabled": "on"},
    )  # fmt: skip
    assert good.status_code == 302 and BenchmarkSchedule.objects.get(name="daily").interval_minutes == 1440


def test_live_part_stops_polling_when_finished(login, objects):
    client = login("viewer")
    assert client.get(f"/benchmarks/{objects['running'].pk}/live/").status_code == 200
    done = client.get(f"/benchmarks/{objects['done'].pk}/live/")
    assert done.status_code == 286  # htmx stops polling
    page = done.content.decode()
    assert "12.5 ms" in page and 'id="regressed"' in page and "9.0 ms" in page


def test_chart_data(login, objects):
    client = login("viewer")
    samples = client.get(f"/benchmarks/{objects['done'].pk}/samples.json").json()
    assert (
        samples["ttft_ms"] == [12.0, 13.0]
        and samples["start_s"] == [0.0, 0.1]
        and samples["state"] == "succeeded"
    )
    trend = client.get(f"/benchmarks/schedules/{objects['schedule'].pk}/trend.json").json()
    assert (
        trend["ttft_p50_ms"] == [12.5]
        and trend["output_tokens_per_s"] == [80.0]
        and trend["regressed"] == [True]
    )
