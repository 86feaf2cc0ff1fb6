"""The gateway's /v1/models: cards come from the replicas and outlive their being unreachable."""

from __future__ import annotations

import httpx

from tests.support.gateway import start_gateway
from tests.support.ports import free_port
from tests.support.upstream import Upstream
from tests.support.waiting import wait_until


def test_a_models_card_comes_from_a_replica_and_is_kept_while_none_answers(serve):
    server = serve(Upstream("a").app)
    gateway, gw = start_gateway(serve, [{"url": server.url, "id": "a"}])
    card = httpx.get(f"{gw.url}/v1/models/m").json()
    assert card["id"] == "m" and card["root"] == "/checkpoints/a" and card["parent"] is None
    server.stop()
    replica = gateway.pools["m"].replicas["a"]
    wait_until(lambda: not replica.routable, "the gateway to find the replica gone")
    assert httpx.get(f"{gw.url}/v1/models").json()["data"] == [card]
    assert httpx.get(f"{gw.url}/v1/models/m").json() == card


def test_a_model_no_replica_has_described_has_its_id_for_root(serve):
    _, gw = start_gateway(serve, [{"url": f"http://127.0.0.1:{free_port()}", "id": "a"}])
    (card,) = httpx.get(f"{gw.url}/v1/models").json()["data"]
    assert card["id"] == card["root"] == "m" and card["parent"] is None
    response = httpx.get(f"{gw.url}/v1/models/other")
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
