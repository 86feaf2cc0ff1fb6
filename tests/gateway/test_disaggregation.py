"""Prefill/decode roles in the gateway: configuration, which replicas serve which phase, and the
prefill-only request (tests/gateway/test_disaggregation_e2e.py runs them against real replicas)."""

import json

import pytest

from gateway.config import BreakerConfig, ConfigError, parse_config
from gateway.disaggregation import prefill_body
from gateway.metrics import GatewayMetrics
from gateway.pool import ModelPool
from gateway.replica import Health
from gateway.sources import routes_from_api


def _pool(*roles: str) -> ModelPool:
    replicas = [
        {"url": f"http://127.0.0.1:{9000 + i}", "id": f"r{i}", "role": r} for i, r in enumerate(roles)
    ]
    config = parse_config({"models": {"m": {"policy": "least_load", "replicas": replicas}}})
    return ModelPool(config.models["m"], BreakerConfig(), GatewayMetrics())


def test_roles_parse_and_default_to_mixed():
    pool = _pool("prefill", "decode")
    assert [r.spec.role for r in pool.replicas.values()] == ["prefill", "decode"]
    plain = parse_config({"models": {"m": {"replicas": ["http://a:1"]}}})
    assert plain.models["m"].replicas[0].role == "mixed"


@pytest.mark.parametrize(
    ("replica", "message"),
    [
        (
            {"url": "http://a:1", "role": "both"},
            r"models.m.replicas\[0\]: replica role must be one of mixed, prefill, decode",
        ),
        ({"url": "http://a:1", "weight": 2}, r"models.m.replicas\[0\]: unknown keys \['weight'\]"),
    ],
)
def test_a_bad_role_or_key_names_the_replica(replica, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({"models": {"m": {"replicas": [replica]}}})


def test_only_a_model_with_both_roles_is_disaggregated():
    assert _pool("prefill", "decode").disaggregated
    assert _pool("prefill", "mixed").disaggregated
    assert not _pool("mixed", "decode").disaggregated
    assert not _pool("prefill").disaggregated


def test_phases_pick_their_role_and_prefill_replicas_serve_when_nothing_else_is_left():
    pool = _pool("prefill", "decode", "decode")
    assert pool.decide(prefill=True).replica.replica_id == "r0"
    assert {pool.decide(exclude=[]).replica.replica_id for _ in range(4)} <= {"r1", "r2"}
    assert pool.decide(exclude=["r1"]).replica.replica_id == "r2"
    assert pool.decide(exclude=["r1", "r2"]).replica.replica_id == "r0"  # rather than fail the request
    pool.replicas["r0"].health = Health.DOWN
    assert pool.decide(prefill=True) is None  # the decode replica then prefills itself


def test_a_prefill_group_busier_than_the_margin_is_skipped():
    pool = _pool("prefill", "decode")  # least_load, load margin 4
    prefill, decode = pool.replicas["r0"], pool.replicas["r1"]
    prefill.in_flight, decode.in_flight = 5, 1
    assert not pool.prefill_saturated()  # 5 <= 1 + 4
    prefill.in_flight = 6
    assert pool.prefill_saturated()
    decode.health = Health.DOWN  # no decode replica: nothing to compare with
    assert not pool.prefill_saturated()


@pytest.mark.parametrize(
    ("api", "body", "length_field"),
    [
        (
            "chat",
            {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 50, "n": 2},
            "max_tokens",
        ),
        (
            "completions",
            {"prompt": "x", "max_tokens": 50, "stream": True, "stream_options": {}},
            "max_tokens",
        ),
        ("messages", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 50}, "max_tokens"),
        ("responses", {"input": "x", "max_output_tokens": 50}, "max_output_tokens"),
    ],
)
def test_the_prefill_request_is_one_token_unstreamed_with_the_same_prompt(api, body, length_field):
    prefill = json.loads(prefill_body(api, {"model": "m", "cache_salt": "t", **body}))
    assert prefill[length_field] == 1 and prefill["stream"] is False
    assert prefill["model"] == "m" and prefill["cache_salt"] == "t"
    assert not {"n", "max_completion_tokens", "stream_options"} & set(prefill)
    for key in ("messages", "prompt", "input"):
        assert prefill.get(key) == body.get(key)


def test_no_prefill_phase_for_other_apis_or_a_stored_conversation():
    assert prefill_body("count_tokens", {"messages": []}) is None
    assert prefill_body("responses", {"input": "x", "previous_response_id": "resp_1"}) is None


def test_roles_come_from_the_control_plane_replica_rows():
    deployments = [{"id": 1, "name": "d", "served_model_name": "m"}]
    replicas = [
        {"id": 1, "name": "p", "deployment": 1, "url": "http://a:1", "state": "ready", "role": "prefill"},
        {"id": 2, "name": "d", "deployment": 1, "url": "http://a:2", "state": "ready", "role": "decode"},
        {"id": 3, "name": "x", "deployment": 1, "url": "http://a:3", "state": "ready"},
    ]
    route = routes_from_api(deployments, replicas)["m"]
    assert [spec.role for spec in route.replicas] == ["prefill", "decode", "mixed"]
