"""Replica lists from a control-plane-shaped REST API on loopback (shapes of serving.api serializers)."""

import asyncio

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.app import build_app
from gateway.config import parse_config
from gateway.service import Gateway
from gateway.sources import ControlPlaneSource, routes_from_api

DEPLOYMENTS = [
    {"id": 1, "name": "chat", "served_model_name": "tiny", "checkpoint": 7, "routing_policy": "cache-aware"},
    {"id": 2, "name": "batch", "served_model_name": "big", "checkpoint": 8, "routing_policy": "round-robin"},
]
REPLICAS = [
    {"id": 10, "name": "chat-0", "deployment": 1, "served_model_name": "tiny", "routing_policy": "cache-aware",
     "state": "ready", "url": "http://10.0.0.1:8100"},
    {"id": 11, "name": "chat-1", "deployment": 1, "served_model_name": "tiny", "routing_policy": "cache-aware",
     "state": "ready", "url": "http://10.0.0.2:8100"},
    {"id": 12, "name": "batch-0", "deployment": 2, "served_model_name": "big", "routing_policy": "round-robin",
     "state": "ready", "url": "http://10.0.0.3:8100"},
    {"id": 13, "name": "chat-2", "deployment": 1, "served_model_name": "tiny", "routing_policy": "cache-aware",
     "state": "draining", "url": "http://10.0.0.4:8100"},
    {"id": 14, "name": "chat-3", "deployment": 1, "state": "ready", "url": None},
]  # fmt: skip
CHECKPOINTS = [{"id": 7, "path": "/models/tiny"}, {"id": 8, "path": "/models/big"}]


def control_plane_app(token: str, calls: list):
    def paginated(items):
        async def endpoint(request: Request):
            calls.append(request.url.path)
            if request.headers.get("authorization") != f"Bearer {token}":
                return JSONResponse({"detail": "no"}, 401)
            offset = int(request.query_params.get("offset", 0))
            page = items[offset : offset + 2]
            more = offset + 2 < len(items)
            next_url = (
                f"{request.url.scheme}://{request.url.netloc}{request.url.path}?offset={offset + 2}"
                if more
                else None
            )
            return JSONResponse({"count": len(items), "next": next_url, "previous": None, "results": page})

        return endpoint

    return Starlette(
        routes=[
            Route("/api/v1/deployments/", paginated(DEPLOYMENTS)),
            Route("/api/v1/replicas/", paginated(REPLICAS)),
            Route("/api/v1/checkpoints/", paginated(CHECKPOINTS)),
        ]
    )


def test_routes_from_the_serializers_shapes():
    routes = routes_from_api(DEPLOYMENTS, REPLICAS, CHECKPOINTS)
    assert sorted(routes) == ["big", "tiny"]
    tiny = routes["tiny"]
    assert tiny.policy.name == "cache_aware" and tiny.tokenizer == "/models/tiny"
    assert [(r.replica_id, r.url) for r in tiny.replicas] == [
        ("chat-0", "http://10.0.0.1:8100"),
        ("chat-1", "http://10.0.0.2:8100"),
    ]
    assert routes["big"].policy.name == "round_robin"


def test_gateway_follows_the_control_plane_and_keeps_the_last_good_list(serve):
    calls = []
    server = serve(control_plane_app("s3cret", calls))

    async def scenario():
        async with httpx.AsyncClient(timeout=2) as client:
            denied = Gateway(
                parse_config({}, require_models=False), ControlPlaneSource(server.url, "wrong", client)
            )
            await denied.refresh()
            assert denied.pools == {} and "401" in denied.last_refresh_error
            await denied.stop()

            gateway = Gateway(
                parse_config({}, require_models=False), ControlPlaneSource(server.url, "s3cret", client)
            )
            await gateway.refresh()
            assert sorted(gateway.pools) == ["big", "tiny"]
            assert sorted(gateway.pools["tiny"].replicas) == ["chat-0", "chat-1"]
            server.stop()  # control plane down: keep serving on what we had
            await gateway.refresh()
            assert gateway.last_refresh_error and sorted(gateway.pools["tiny"].replicas) == [
                "chat-0",
                "chat-1",
            ]
            await gateway.stop()

    asyncio.run(scenario())
    assert calls.count("/api/v1/replicas/") >= 3  # paginated: followed 'next'


IDLE = [
    {"id": 3, "name": "idle", "served_model_name": "idle", "replicas": 0, "ready_replicas": 0},
    {"id": 4, "name": "broken", "served_model_name": "broken", "replicas": 1, "ready_replicas": 0,
     "rollout_status": "failed", "rollout_reason": "revision 2 stopped: replica broken-1 failed"},
    {"id": 5, "name": "warming", "replicas": 2, "ready_replicas": 0, "placement_status": "ok"},
]  # fmt: skip


def test_deployments_without_a_ready_replica_are_known_with_their_state():
    routes = routes_from_api(DEPLOYMENTS + IDLE, REPLICAS, CHECKPOINTS)
    assert routes["tiny"].unavailable is None and len(routes["tiny"].replicas) == 2
    assert routes["idle"].unavailable == "deployment idle is scaled to 0 replicas"
    assert routes["broken"].unavailable == (
        "deployment broken has a failed rollout: revision 2 stopped: replica broken-1 failed"
    )
    assert routes["warming"].unavailable == "deployment warming is starting: 0 of 2 replicas ready"
    assert routes["warming"].replicas == ()


class FixedSource:
    def __init__(self, routes):
        self.routes = routes

    async def fetch(self):
        return self.routes


def test_a_known_model_without_ready_replicas_gets_503_naming_the_state(serve):
    gateway = Gateway(parse_config({}, require_models=False), FixedSource(routes_from_api(IDLE, [], [])))
    server = serve(build_app(gateway))
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "idle", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "no_ready_replica"
    assert (
        error["message"] == "The model `idle` has no ready replica: deployment idle is scaled to 0 replicas."
    )
    unknown = httpx.post(f"{server.url}/v1/chat/completions", json={"model": "nope", "messages": []})
    assert unknown.status_code == 404
    assert (
        httpx.get(f"{server.url}/gateway/state")
        .json()["unavailable"]["warming"]
        .endswith("0 of 2 replicas ready")
    )
