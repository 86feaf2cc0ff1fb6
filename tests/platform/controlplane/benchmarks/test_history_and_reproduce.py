"""Conditions recorded per run, history kept when a deployment goes, reproduce with a conditions diff
(API and UI), sweep validation and chart data, and the /metrics verdicts."""

import pytest
from controlplane.benchmarks import conditions
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule
from controlplane.benchmarks.sweeps import chart_series, pareto_front

pytestmark = pytest.mark.django_db
RUNS = "/api/v1/benchmark-runs/"
GRID = {"concurrency": [1, 2, 4], "input_tokens": [16, 64], "output_tokens": [8, 32]}
REPORT = {
    "engine": "0.1.0", "torch": "2.5.1", "triton": None, "cuda_driver": None, "python": "3.11.2",
    "code_revision": "abc123", "dtype": "float32", "model": "tiny", "replica_id": "r-1",
    "engine_config": {"max_num_seqs": 256, "model_dir": "/ckpt/a", "block_size": 16},
}  # fmt: skip


def finished(deployment, **fields) -> BenchmarkRun:
    run = BenchmarkRun.objects.create(deployment=deployment, **fields)
    recorded = conditions.capture(run, deployment, [], [REPORT])
    run.start(["http://replica"], recorded)
    run.succeed({"requests_ok": 4, "ttft_p50_ms": 10.0}, [])
    return run


def test_capture_flattens_and_diffs_what_matters(make_deployment):
    deployment = make_deployment(engine_options={"max_num_seqs": 1}, tp_size=1)
    run = BenchmarkRun.objects.create(deployment=deployment, seed=7)
    slow = {
        **REPORT,
        "replica_id": "r-2",
        "engine_config": {**REPORT["engine_config"], "max_num_seqs": 1, "model_dir": "/x"},
    }
    recorded = conditions.capture(run, deployment, [], [REPORT, slow])
    assert recorded["checkpoint"]["digest"] == deployment.checkpoint.digest
    assert recorded["versions"]["torch"] == "2.5.1" and recorded["dtype"] == "float32"
    assert recorded["workload"]["seed"] == 7 and recorded["routing_policy"] == deployment.routing_policy
    assert recorded["engine_config"] == {"disagree": [REPORT["engine_config"], slow["engine_config"]]}
    faster = conditions.capture(run, deployment, [], [REPORT])
    flat = conditions.flatten(faster)
    assert flat["engine_config.max_num_seqs"] == 256 and flat["engine_options.max_num_seqs"] == 1
    changed = conditions.diff(faster, {**faster, "engine_config": slow["engine_config"], "tp_size": 2})
    # model_dir names a place, not a condition: left out
    assert changed == [
        {"key": "engine_config.max_num_seqs", "before": 256, "after": 1},
        {"key": "tp_size", "before": 1, "after": 2},
    ]
    unreadable = conditions.replica_reports(["http://127.0.0.1:9"])
    assert "error" in unreadable[0] and "/version" in unreadable[0]["error"]


def test_conditions_are_set_once_at_start(make_deployment):
    run = finished(make_deployment())
    stored = BenchmarkRun.objects.get(pk=run.pk)
    assert stored.conditions["versions"]["code_revision"] == "abc123"
    assert stored.conditions["deployment"]["name"] == "chat"


def test_deleting_a_deployment_keeps_runs_and_stops_schedules(api, make_deployment, login):
    deployment = make_deployment("doomed")
    schedule = BenchmarkSchedule.objects.create(name="nightly", deployment=deployment)
    done = finished(deployment, schedule=schedule)
    queued = BenchmarkRun.objects.create(deployment=deployment)
    assert api("operator").delete(f"/api/v1/deployments/{deployment.pk}/").status_code == 204
    done.refresh_from_db(), queued.refresh_from_db(), schedule.refresh_from_db()
    assert done.deployment is None and done.deployment_name == "doomed" and done.state == "succeeded"
    assert queued.state == "cancelled" and queued.reason == "deployment doomed was deleted"
    assert schedule.deployment is None and schedule.enabled is False and schedule.deployment_name == "doomed"
    body = api("viewer").get(f"{RUNS}{done.pk}/").json()
    assert body["deployment"] is None and body["deployment_name"] == "doomed"
    assert body["conditions"]["deployment"]["name"] == "doomed"
    listed = api("viewer").get(f"{RUNS}?deployment_name=doomed").json()
    assert {r["id"] for r in listed["results"]} == {done.pk, queued.pk}
    again = api("operator").patch(
        f"/api/v1/benchmark-schedules/{schedule.pk}/", {"enabled": True}, format="json"
    )
    assert again.status_code == 400 and "was deleted" in again.json()["enabled"][0]
    client = login("operator")
    for url in (
        "/benchmarks/",
        f"/benchmarks/{done.pk}/",
        "/benchmarks/schedules/",
        f"/benchmarks/schedules/{schedule.pk}/",
    ):
        page = client.get(url)
        assert page.status_code == 200 and "doomed" in page.content.decode(), url
    assert 'id="deployment-deleted"' in client.get(f"/benchmarks/schedules/{schedule.pk}/").content.decode()
    from controlplane.benchmarks.scheduling import run_due_schedules

    assert run_due_schedules() == []


def test_reproduce_previews_the_diff_then_stores_it(api, make_deployment, django_capture_on_commit_callbacks):
    source = finished(make_deployment("first"), seed=11, sweep=GRID, requests=4)
    make_deployment("second", engine_options={"max_num_seqs": 1})
    url = f"{RUNS}{source.pk}/reproduce/"
    assert api("viewer").post(url, {"deployment": "second"}, format="json").status_code == 403
    bad = api("operator").post(url, {"deployment": "nope"}, format="json")
    assert bad.status_code == 400 and list(bad.json()) == ["deployment"]
    preview = api("operator").post(url, {"deployment": "second", "preview": True}, format="json")
    assert preview.status_code == 200 and BenchmarkRun.objects.count() == 1
    keys = {c["key"]: c for c in preview.json()["conditions_diff"]}
    assert keys["deployment.name"] == {"key": "deployment.name", "before": "first", "after": "second"}
    assert keys["engine_options.max_num_seqs"]["after"] == 1
    assert "versions.torch" in keys  # no ready replica answered: the versions are unknown now
    with django_capture_on_commit_callbacks() as published:
        started = api("operator").post(url, {"deployment": "second"}, format="json")
    assert started.status_code == 202 and len(published) == 1
    body = started.json()
    assert body["reproduced_from"] == source.pk and body["deployment_name"] == "second"
    assert body["seed"] == 11 and body["sweep"] == GRID and body["total_requests"] == 48
    assert body["conditions_diff"] == preview.json()["conditions_diff"]


def test_reproduce_in_the_ui_shows_the_diff_before_starting(login, make_deployment):
    source = finished(make_deployment("first"))
    make_deployment("second", engine_options={"max_num_seqs": 1})
    client = login("operator")
    assert 'id="reproduce-form"' in client.get(f"/benchmarks/{source.pk}/").content.decode()
    page = client.get(f"/benchmarks/{source.pk}/reproduce/?deployment=second").content.decode()
    assert 'data-key="engine_options.max_num_seqs"' in page and "Start the reproduction</button>" in page
    assert BenchmarkRun.objects.count() == 1  # nothing started yet
    assert client.get(f"/benchmarks/{source.pk}/reproduce/?deployment=nope").status_code == 400
    response = client.post(f"/benchmarks/{source.pk}/reproduce/", {"deployment": "second"})
    run = BenchmarkRun.objects.exclude(pk=source.pk).get()
    assert response.status_code == 302 and run.reproduced_from == source
    assert any(c["key"] == "engine_options.max_num_seqs" for c in run.conditions_diff)
    assert 'id="conditions-diff"' in client.get(f"/benchmarks/{run.pk}/").content.decode()


@pytest.mark.parametrize(
    "sweep, message",
    [
        ({"concurrency": [1], "input_tokens": [8]}, "output_tokens must be a non-empty list"),
        ({**GRID, "batch": [1]}, "unknown axis 'batch'"),
        ({**GRID, "concurrency": [0, 2]}, "concurrency values must be integers from 1 to 512"),
        ({**GRID, "input_tokens": [8, 8]}, "input_tokens has repeated values"),
        (
            {"concurrency": list(range(1, 9)), "input_tokens": [1, 2, 3], "output_tokens": [1, 2, 3]},
            "at most 64",
        ),
        ({**GRID, "concurrency": [1, 80]}, "must not exceed requests"),
        ([1, 2], "must be an object"),
    ],
)
def test_bad_sweeps_are_400(api, make_deployment, sweep, message):
    payload = {"deployment": make_deployment().pk, "requests": 8, "concurrency": 1, "sweep": sweep}
    response = api("operator").post(RUNS, payload, format="json")
    assert response.status_code == 400 and message in str(response.json()["sweep"]), response.json()


def test_sweep_run_through_the_api(api, make_deployment, django_capture_on_commit_callbacks):
    payload = {"deployment": make_deployment().pk, "requests": 4, "concurrency": 1, "sweep": GRID}
    with django_capture_on_commit_callbacks() as published:
        response = api("operator").post(RUNS, payload, format="json")
    assert response.status_code == 201 and len(published) == 1, response.json()
    body = response.json()
    assert body["sweep"] == GRID and body["total_requests"] == 48 and body["conditions"] == {}


def test_sweep_from_the_ui_form(login, make_deployment):
    deployment = make_deployment()
    client = login("operator")
    form = {"deployment": deployment.pk, "workload": "chat-short", "requests": 4, "concurrency": 1,
            "max_tokens": 8, "seed": 0, "sweep_concurrency": "1,2", "sweep_input_tokens": "8, x",
            "sweep_output_tokens": "4"}  # fmt: skip
    bad = client.post("/benchmarks/new/", form)
    assert bad.status_code == 400 and 'id="error-sweep_input_tokens"' in bad.content.decode()
    client.post("/benchmarks/new/", {**form, "sweep_input_tokens": "8,16"})
    assert BenchmarkRun.objects.get().sweep == {
        "concurrency": [1, 2],
        "input_tokens": [8, 16],
        "output_tokens": [4],
    }


def test_pareto_fronts():
    # prefill: smaller TTFT and larger throughput are better
    points = [(10.0, 100.0), (20.0, 300.0), (15.0, 90.0), (30.0, 250.0), (40.0, 400.0)]
    assert pareto_front(points, smaller_x_better=True) == [(10.0, 100.0), (20.0, 300.0), (40.0, 400.0)]
    # decode: larger per-user speed and larger throughput are better
    points = [(50.0, 50.0), (40.0, 120.0), (30.0, 100.0), (10.0, 200.0)]
    assert pareto_front(points, smaller_x_better=False) == [(10.0, 200.0), (40.0, 120.0), (50.0, 50.0)]
    assert pareto_front([], smaller_x_better=True) == []


def test_sweep_chart_data_compares_runs(login, make_deployment):
    deployment = make_deployment()
    runs = []
    for scale in (1.0, 2.0):
        run = BenchmarkRun.objects.create(deployment=deployment, sweep=GRID, requests=4)
        run.start(["u"])
        points = [
            {"concurrency": c, "input_tokens": i, "output_tokens": o, "ttft_p50_ms": scale * c * i,
             "uncached_input_tokens_per_s": 10.0 * c * i, "per_user_output_tokens_per_s": 100.0 / c,
             "output_tokens_per_s": scale * 50.0 * c + o}
            for c in GRID["concurrency"] for i in GRID["input_tokens"] for o in GRID["output_tokens"]
        ]  # fmt: skip
        run.succeed({"requests_ok": 48, "sweep_points": points}, [])
        runs.append(run)
    series = chart_series(runs[0])
    assert len(series["prefill"]["points"]) == 12 and len(series["decode"]["points"]) == 12
    assert series["prefill"]["front"] and series["decode"]["front"]
    body = login("viewer").get(f"/benchmarks/{runs[0].pk}/sweep.json?compare={runs[1].pk},x").json()
    assert [r["id"] for r in body["runs"]] == [runs[0].pk, runs[1].pk]


def test_metrics_expose_each_schedules_latest_verdict(client, make_deployment):
    deployment = make_deployment()
    schedule = BenchmarkSchedule.objects.create(name="nightly", deployment=deployment)
    run = BenchmarkRun.objects.create(deployment=deployment, schedule=schedule)
    run.start(["u"])
    judged = {"ttft_p50_ms": {"regressed": False}, "output_tokens_per_s": {"regressed": True}}
    run.succeed({"requests_ok": 1, "regressed": True, "regression": {"metrics": judged}}, [])
    text = client.get("/metrics").content.decode()  # no login: Prometheus scrapes it
    assert (
        'chassis_benchmark_regression{deployment="chat",metric="output_tokens_per_s",schedule="nightly"} 1.0'
        in text
    )
    assert (
        'chassis_benchmark_regression{deployment="chat",metric="ttft_p50_ms",schedule="nightly"} 0.0' in text
    )
    assert 'chassis_benchmark_regressed{deployment="chat",schedule="nightly"} 1.0' in text
    assert f'chassis_benchmark_latest_run{{deployment="chat",schedule="nightly"}} {float(run.pk)}' in text


def test_schema_documents_reproduce_and_sweeps():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    assert "post" in schema["paths"][f"{RUNS}{{id}}/reproduce/"]
    fields = schema["components"]["schemas"]["BenchmarkRun"]["properties"]
    assert {"sweep", "conditions", "conditions_diff", "reproduced_from", "deployment_name"} <= set(fields)
