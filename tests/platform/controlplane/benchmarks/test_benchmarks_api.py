"""/api/v1/benchmark-runs/ and /api/v1/benchmark-schedules/: roles, field errors, cancel, audit."""

import pytest
from controlplane.api.models import AuditEntry
from controlplane.benchmarks.choices import RunState as S
from controlplane.benchmarks.models import BenchmarkRun

pytestmark = pytest.mark.django_db
RUNS = "/api/v1/benchmark-runs/"
SCHEDULES = "/api/v1/benchmark-schedules/"


@pytest.fixture
def deployment(make_deployment):
    return make_deployment()


def payload(target, /, **overrides):
    return {"deployment": target.pk, "workload": "shared-prefix", "requests": 20, "concurrency": 4,
            "max_tokens": 32, "seed": 9, **overrides}  # fmt: skip


def test_no_token_401_viewer_403_operator_201(api, deployment, django_capture_on_commit_callbacks):
    assert api(None).post(RUNS, payload(deployment), format="json").status_code == 401
    assert api(None).get(RUNS).status_code == 401
    assert api("viewer").post(RUNS, payload(deployment), format="json").status_code == 403
    assert api("viewer").post(SCHEDULES, {"name": "n"}, format="json").status_code == 403
    with django_capture_on_commit_callbacks() as published:
        response = api("operator").post(RUNS, payload(deployment), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (
        body["state"] == "queued"
        and body["workload"] == "shared-prefix"
        and body["deployment_name"] == "chat"
    )
    assert len(published) == 1  # the run task goes out once the row is committed
    run = BenchmarkRun.objects.get(pk=body["id"])
    assert run.created_by.username == "operator-user"
    entry = AuditEntry.objects.get(action="create", object_type="benchmarks.benchmarkrun")
    assert entry.username == "operator-user" and entry.changes["requests"] == 20
    assert api("viewer").get(f"{RUNS}{run.pk}/").json()["id"] == run.pk


@pytest.mark.parametrize(
    "override, field",
    [
        ({"requests": 0}, "requests"),
        ({"concurrency": 0}, "concurrency"),
        ({"max_tokens": 100000}, "max_tokens"),
        ({"seed": -1}, "seed"),
        ({"workload": "bursty"}, "workload"),
        ({"deployment": 999999}, "deployment"),
        ({"deployment": None}, "deployment"),
        ({"requests": 4, "concurrency": 8}, "concurrency"),
    ],
)
def test_bad_parameters_are_400_naming_the_field(api, deployment, override, field):
    response = api("operator").post(RUNS, payload(deployment, **override), format="json")
    assert response.status_code == 400 and list(response.json()) == [field], response.json()


def test_runs_cannot_be_edited_or_deleted(api, deployment):
    run = BenchmarkRun.objects.create(deployment=deployment)
    assert api("admin").patch(f"{RUNS}{run.pk}/", {"seed": 3}, format="json").status_code == 405
    assert api("admin").delete(f"{RUNS}{run.pk}/").status_code == 405


def test_cancel_action(api, deployment):
    run = BenchmarkRun.objects.create(deployment=deployment)
    assert api("viewer").post(f"{RUNS}{run.pk}/cancel/").status_code == 403
    response = api("operator").post(f"{RUNS}{run.pk}/cancel/")
    assert response.status_code == 202 and response.json()["state"] == "cancelled"
    assert response.json()["reason"] == "cancelled by operator-user"
    assert AuditEntry.objects.filter(action="cancel", object_id=str(run.pk)).exists()
    again = api("operator").post(f"{RUNS}{run.pk}/cancel/")
    assert again.status_code == 400 and "cannot become cancelled" in again.json()["state"][0]


def test_list_filter_order(api, deployment, make_deployment):
    other = make_deployment("other")
    BenchmarkRun.objects.create(deployment=deployment, workload="multi-turn")
    done = BenchmarkRun.objects.create(deployment=other)
    done.start(["u"])
    done.succeed({"requests_ok": 1, "regressed": True}, [])
    client = api("viewer")
    assert client.get(f"{RUNS}?state=succeeded").json()["count"] == 1
    assert client.get(f"{RUNS}?workload=multi-turn").json()["results"][0]["deployment_name"] == "chat"
    assert client.get(f"{RUNS}?deployment__name=other").json()["results"][0]["id"] == done.pk
    assert [r["id"] for r in client.get(f"{RUNS}?regressed=true").json()["results"]] == [done.pk]
    ids = [r["id"] for r in client.get(f"{RUNS}?ordering=id").json()["results"]]
    assert ids == sorted(ids) and len(ids) == 2
    assert done.state == S.SUCCEEDED


def test_schedule_crud(api, deployment):
    client = api("operator")
    response = client.post(
        SCHEDULES, {**payload(deployment), "name": "hourly", "interval_minutes": 60}, format="json"
    )
    assert response.status_code == 201, response.json()
    pk = response.json()["id"]
    assert response.json()["enabled"] is True and response.json()["last_run"] is None
    bad = client.post(SCHEDULES, {**payload(deployment), "name": "x", "interval_minutes": 0}, format="json")
    assert bad.status_code == 400 and list(bad.json()) == ["interval_minutes"]
    assert client.patch(f"{SCHEDULES}{pk}/", {"enabled": False}, format="json").json()["enabled"] is False
    assert api("viewer").patch(f"{SCHEDULES}{pk}/", {"enabled": True}, format="json").status_code == 403
    assert client.delete(f"{SCHEDULES}{pk}/").status_code == 204
    assert set(AuditEntry.objects.filter(object_id=str(pk)).values_list("action", flat=True)) == {
        "create", "update", "delete",
    }  # fmt: skip


def test_schema_documents_the_benchmark_routes():
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    assert set(paths[RUNS]) == {"get", "post"} and "post" in paths[f"{RUNS}{{id}}/cancel/"]
    assert {"get", "post"} <= set(paths[SCHEDULES]) and "delete" in paths[f"{SCHEDULES}{{id}}/"]
