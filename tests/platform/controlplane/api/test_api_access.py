"""Every endpoint of the OpenAPI schema: 401 without a token, readable with the right role,
viewer writes refused with 403, bad payloads answered 400 naming the field."""

import re

import pytest
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db
ADMIN_ONLY_READS = ("/api/v1/users/", "/api/v1/audit-entries/")
SELF_SERVICE = ("/api/v1/api-tokens/",)  # every role issues and revokes its own tokens


@pytest.fixture
def schema_paths():
    return SchemaGenerator().get_schema(request=None, public=True)["paths"]


@pytest.fixture
def objects(make_node, make_deployment, tokens):
    """One row behind every detail route, so `{id}` can be filled in."""
    from controlplane.api import audit
    from controlplane.serving.models import MetricSample, Replica
    from django.contrib.auth import get_user_model

    node = make_node("n1", count=2)
    deployment = make_deployment(replicas=1, vendor="nvidia")
    replica = Replica.create_for(deployment, "test", "t")
    MetricSample.objects.create(replica=replica, at=node.created)
    audit.record(get_user_model().objects.first(), "create", deployment)
    from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule

    BenchmarkRun.objects.create(deployment=deployment)
    BenchmarkSchedule.objects.create(name="nightly", deployment=deployment)
    return {"deployment": deployment, "replica": replica, "node": node}


def concrete(path: str, objects) -> str:
    from controlplane.api.models import ApiToken, AuditEntry
    from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule
    from controlplane.checkpoints.models import Checkpoint
    from controlplane.fleet.models import Accelerator, Cluster, ScaleUpDomain
    from controlplane.serving.models import MetricSample, ReplicaEvent
    from django.contrib.auth import get_user_model

    ids = {
        "users": get_user_model().objects.first().pk,
        "audit-entries": AuditEntry.objects.first().pk,
        "api-tokens": ApiToken.objects.filter(user__username="viewer-user").first().pk,
        "nodes": objects["node"].pk,
        "accelerators": Accelerator.objects.first().pk,
        "clusters": Cluster.objects.first().pk,
        "scale-up-domains": ScaleUpDomain.objects.first().pk,
        "checkpoints": Checkpoint.objects.first().pk,
        "deployments": objects["deployment"].pk,
        "replicas": objects["replica"].pk,
        "replica-events": ReplicaEvent.objects.first().pk,
        "metric-samples": MetricSample.objects.first().pk,
        "benchmark-runs": BenchmarkRun.objects.first().pk,
        "benchmark-schedules": BenchmarkSchedule.objects.first().pk,
    }
    resource = path.split("/")[3]
    return path.replace("{id}", str(ids[resource]))


def test_schema_covers_every_api_route(schema_paths):
    from django.urls import get_resolver

    def walk(patterns, prefix=""):
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if hasattr(pattern, "url_patterns"):
                yield from walk(pattern.url_patterns, route)
            else:
                yield route

    routes = {
        re.sub(r"\(\?P<pk>\[\^/\.\]\+\)", "{id}", route).replace("^", "").replace("$", "")
        for route in walk(get_resolver().url_patterns)
        if route.startswith("api/v1/") and "format" not in route
    }
    documented = {path.lstrip("/") for path in schema_paths}
    assert routes and routes <= documented, routes - documented
    for resource in (
        "nodes",
        "accelerators",
        "checkpoints",
        "deployments",
        "replicas",
        "replica-events",
        "users",
        "benchmark-runs",
        "benchmark-schedules",
    ):
        assert f"/api/v1/{resource}/" in schema_paths


def test_no_token_is_401_everywhere(api, objects, schema_paths):
    client = api(None)
    for path, operations in schema_paths.items():
        for method in operations:
            response = getattr(client, method)(concrete(path, objects), {}, format="json")
            assert response.status_code == 401, (method, path, response.status_code)
            assert response["WWW-Authenticate"] == "Bearer"


def test_reads_with_the_right_role(api, objects, schema_paths):
    for path, operations in schema_paths.items():
        if "get" not in operations:
            continue
        url = concrete(path, objects)
        role = "admin" if path.startswith(ADMIN_ONLY_READS) else "viewer"
        assert api(role).get(url).status_code == 200, url
        if role == "admin":
            assert api("operator").get(url).status_code == 403, url


def test_viewer_gets_403_on_every_write(api, objects, schema_paths):
    client = api("viewer")
    for path, operations in schema_paths.items():
        if path.startswith(SELF_SERVICE):
            continue
        for method in set(operations) & {"post", "put", "patch", "delete"}:
            response = getattr(client, method)(concrete(path, objects), {}, format="json")
            assert response.status_code == 403, (method, path, response.status_code)


def test_operator_cannot_change_topology_or_users(api, objects):
    client = api("operator")
    assert client.post("/api/v1/clusters/", {"name": "c2"}, format="json").status_code == 403
    assert client.post(f"/api/v1/nodes/{objects['node'].pk}/cordon/").status_code == 403
    assert client.post("/api/v1/users/", {"username": "x"}, format="json").status_code == 403
    assert api("admin").post(f"/api/v1/nodes/{objects['node'].pk}/cordon/").json()["state"] == "cordoned"


def test_pagination_filtering_ordering(api, objects, make_deployment):
    make_deployment("second", replicas=0)
    client = api("viewer")
    page = client.get("/api/v1/deployments/?limit=1&ordering=-name").json()
    assert page["count"] == 2 and len(page["results"]) == 1 and page["results"][0]["name"] == "second"
    assert page["next"]
    assert [d["name"] for d in client.get("/api/v1/deployments/?name=chat").json()["results"]] == ["chat"]
    replicas = client.get("/api/v1/replicas/?state=pending").json()["results"]
    assert [r["state"] for r in replicas] == ["pending"]
    assert client.get("/api/v1/replicas/?state=ready").json()["count"] == 0
