"""``chassis dashboards targets`` reads the REAL control plane (pytest-django live server: real models,
serializers, token auth, pagination) and writes Prometheus file_sd files."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def ready_replicas(count: int):
    """Checkpoint -> deployment -> replicas moved to ready through the models' own methods."""
    from controlplane.checkpoints.models import Checkpoint
    from controlplane.serving.choices import ReplicaState
    from controlplane.serving.models import Deployment, Replica

    checkpoint = Checkpoint.objects.create(name="tiny", path="/models/tiny")
    checkpoint.start_validation()
    checkpoint.mark_ready({"architecture": "Qwen3ForCausalLM", "parameter_count": 1000})
    deployment = Deployment.objects.create(name="chat", served_model_name="tiny", checkpoint=checkpoint)
    replicas = []
    for ordinal in range(count):
        replica = Replica.objects.create(deployment=deployment, ordinal=ordinal)
        replica.transition(ReplicaState.SCHEDULED, "test", "test")
        replica.transition(ReplicaState.LAUNCHING, "test", "test", host="127.0.0.1", port=8100 + ordinal)
        replica.transition(ReplicaState.READY, "test", "test")
        replicas.append(replica)
    Replica.objects.create(deployment=deployment, ordinal=count)  # pending: not a target
    return replicas


def viewer_token() -> str:
    from django.core.management import call_command

    out = StringIO()
    call_command("create_api_token", "prometheus-sd", "--role", "viewer", stdout=out)
    return out.getvalue().strip()


def targets(control_plane: str, out_dir, token: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "chassis", "dashboards", "targets",
        "--control-plane", control_plane, "--token", token, "--out", str(out_dir), *extra,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_ready_replicas_become_file_sd_targets(live_server, tmp_path):
    ready_replicas(3)
    token = viewer_token()
    result = targets(
        live_server.url, tmp_path, token, "--gateway", "10.1.0.5:8080", "--gateway", "10.1.0.6:8080"
    )
    assert result.returncode == 0, result.stderr
    assert "replicas.json: 3 target(s)" in result.stdout

    replicas = json.loads((tmp_path / "replicas.json").read_text())
    assert [g["targets"] for g in replicas] == [["127.0.0.1:8100"], ["127.0.0.1:8101"], ["127.0.0.1:8102"]]
    assert replicas[0]["labels"] == {"deployment": "chat", "replica": "chat-0", "role": "mixed"}
    gateways = json.loads((tmp_path / "gateways.json").read_text())
    assert gateways == [{"labels": {}, "targets": ["10.1.0.5:8080", "10.1.0.6:8080"]}]
    control_plane = json.loads((tmp_path / "control-plane.json").read_text())
    assert control_plane == [{"labels": {}, "targets": [f"{live_server.url}/health"]}]

    # Unchanged content leaves the file alone (Prometheus re-reads on change only).
    before = (tmp_path / "replicas.json").stat().st_mtime_ns
    assert targets(live_server.url, tmp_path, token).returncode == 0
    assert (tmp_path / "replicas.json").stat().st_mtime_ns == before


def test_a_refused_token_keeps_the_last_good_file(live_server, tmp_path):
    ready_replicas(1)
    assert targets(live_server.url, tmp_path, viewer_token()).returncode == 0
    good = (tmp_path / "replicas.json").read_text()

    result = targets(live_server.url, tmp_path, "not-a-token")
    assert result.returncode == 1
    assert "refused the token (401)" in result.stderr
    assert (tmp_path / "replicas.json").read_text() == good


def test_bad_arguments_are_refused(tmp_path):
    assert targets("127.0.0.1:8000", tmp_path, "t").returncode == 2
    result = targets("http://127.0.0.1:9", tmp_path, "t", "--gateway", "no-port")
    assert result.returncode == 2 and "HOST:PORT" in result.stderr
    unreachable = targets("http://127.0.0.1:9", tmp_path, "t")
    assert unreachable.returncode == 1 and "unreachable" in unreachable.stderr
