"""The admin-API locustfile against the REAL control plane (pytest-django live server: real views,
serializers, token auth) with a viewer token, and without one."""

from __future__ import annotations

from io import StringIO

import pytest

from tests.loadtests.locust_run import run_locust

pytestmark = pytest.mark.django_db(transaction=True)


def seed_rows() -> str:
    """A ready replica of a deployment, and a viewer token."""
    from controlplane.checkpoints.models import Checkpoint
    from controlplane.serving.choices import ReplicaState
    from controlplane.serving.models import Deployment, Replica
    from django.core.management import call_command

    checkpoint = Checkpoint.objects.create(name="tiny", path="/models/tiny")
    checkpoint.start_validation()
    checkpoint.mark_ready({"architecture": "Qwen3ForCausalLM", "parameter_count": 1000})
    deployment = Deployment.objects.create(name="chat", served_model_name="tiny", checkpoint=checkpoint)
    replica = Replica.objects.create(deployment=deployment, ordinal=0)
    replica.transition(ReplicaState.SCHEDULED, "test", "test")
    replica.transition(ReplicaState.LAUNCHING, "test", "test", host="127.0.0.1", port=8100)
    replica.transition(ReplicaState.READY, "test", "test")
    out = StringIO()
    call_command("create_api_token", "loadtest", "--role", "viewer", stdout=out)
    return out.getvalue().strip()


def test_admin_users_read_deployments_and_replicas(live_server, tmp_path):
    token = seed_rows()
    run = run_locust(
        ["admin_api.py"], live_server.url, tmp_path / "admin", 2, 4, {"CHASSIS_API_TOKEN": token}
    )
    rows = run["rows"]
    assert run["result"].returncode == 0, run["result"].stderr[-3000:]
    # Tasks are picked at random; in a few seconds at least one list, and the detail page it links
    # to (so the list held the seeded rows), was read.
    details = [rows.get(("GET", f"/api/v1/{kind}/[id]/")) for kind in ("deployments", "replicas")]
    assert any(row and int(row["Request Count"]) > 0 for row in details), sorted(rows)
    assert int(rows[("", "Aggregated")]["Failure Count"]) == 0


def test_a_wrong_token_shows_as_failures(live_server, tmp_path):
    seed_rows()
    run = run_locust(["admin_api.py"], live_server.url, tmp_path / "bad", 2, 2, {"CHASSIS_API_TOKEN": "nope"})
    total = run["rows"][("", "Aggregated")]
    assert int(total["Failure Count"]) == int(total["Request Count"]) > 0
