"""``chassis gateway --control-plane URL --token T`` against the real Django control plane.

The control plane runs as pytest-django's live server on the real models, serializers, token
authentication and pagination; its rows point at a real ``chassis serve`` replica process, and a
real ``chassis gateway`` process reads them through the REST API and routes to that replica.
"""

from __future__ import annotations

import time

import httpx
import pytest

from gateway.bench.cluster import Process, _chassis
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def model_dir(tiny_checkpoint):
    return tiny_checkpoint


def ready_replica_rows(model_dir, port: int):
    """Checkpoint -> deployment -> replica, moved to ready through the models' own methods."""
    from controlplane.checkpoints.models import Checkpoint
    from controlplane.serving.choices import ReplicaState, RoutingPolicy
    from controlplane.serving.models import Deployment, Replica

    checkpoint = Checkpoint.objects.create(name="tiny", path=str(model_dir))
    checkpoint.start_validation()
    checkpoint.mark_ready({"architecture": "Qwen3ForCausalLM", "parameter_count": 1000})
    deployment = Deployment.objects.create(
        name="chat", served_model_name="tiny", checkpoint=checkpoint, routing_policy=RoutingPolicy.CACHE_AWARE
    )
    replica = Replica.objects.create(deployment=deployment, ordinal=0)
    replica.transition(ReplicaState.SCHEDULED, "test", "test")
    replica.transition(ReplicaState.LAUNCHING, "test", "test", host="127.0.0.1", port=port)
    return replica


def api_token() -> str:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("create_api_token", "gateway-bot", "--role", "viewer", stdout=out)
    return out.getvalue().strip()


def test_gateway_routes_to_the_ready_replicas_the_control_plane_lists(live_server, model_dir, tmp_path):
    from controlplane.serving.choices import ReplicaState

    port = free_port()
    replica = ready_replica_rows(model_dir, port)
    serve = Process(
        "replica",
        _chassis(
            "serve", str(model_dir), "--port", str(port), "--device", "cpu", "--dtype", "float32",
            "--served-model-name", "tiny", "--replica-id", str(replica.uid), "--log-level", "warning",
        ),
        port,
        tmp_path / "replica.log",
    )  # fmt: skip
    gateway_port = free_port()
    gateway = Process(
        "gateway",
        _chassis(
            "gateway", "--port", str(gateway_port), "--control-plane", live_server.url,
            "--token", api_token(), "--log-level", "warning",
        ),
        gateway_port,
        tmp_path / "gateway.log",
    )  # fmt: skip
    try:
        serve.start().wait_ready("/health", time.monotonic() + 120)
        replica.transition(ReplicaState.READY, "health check passed", "test")
        gateway.start().wait_ready("/health", time.monotonic() + 60)

        def listed():
            models = httpx.get(f"{gateway.url}/gateway/state", timeout=5).json()["models"]
            return next((m for m in models if m["model"] == "tiny" and m["replicas"]), None)

        state = wait_until(listed, "the gateway to list the control plane's replica")
        assert state["policy"] == "cache_aware"
        assert state["tokenizer"] == str(model_dir)  # the deployment's checkpoint path
        assert [(r["id"], r["url"]) for r in state["replicas"]] == [("chat-0", serve.url)]

        body = {
            "model": "tiny",
            "messages": [
                {"role": "system", "content": "You are terse. " * 20},
                {"role": "user", "content": "Hi"},
            ],
            "max_tokens": 4,
            "temperature": 0,
        }
        response = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        assert response.headers["x-chassis-replica"] == "chat-0"
        assert response.json()["choices"][0]["message"]["content"] is not None
        # The KV follower found the replica through the same rows: its index holds the prompt's blocks.
        wait_until(
            lambda: httpx.get(f"{gateway.url}/gateway/kv/tiny/chat-0", timeout=5).json()["hashes"],
            "the replica's KV events in the gateway's index",
        )

        # Draining in the control plane takes the replica out of the gateway's list.
        replica.transition(ReplicaState.DRAINING, "scale down", "test")
        wait_until(lambda: listed() is None, "the gateway to drop the draining replica")
        refused = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)
        assert refused.status_code in (404, 503), refused.text
    finally:
        gateway.stop()
        serve.stop()
