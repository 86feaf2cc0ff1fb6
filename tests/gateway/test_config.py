import json

import pytest

from gateway.config import ConfigError, load_config_file, parse_config


def test_yaml_and_json_files_load_with_defaults(tmp_path):
    yaml_file = tmp_path / "gw.yaml"
    yaml_file.write_text(
        """
models:
  tiny:
    policy: {name: cache_aware, load_margin: 3}
    tokenizer: /ckpt/tiny
    replicas:
      - http://127.0.0.1:8100/
      - {url: "http://127.0.0.1:8101", id: r1}
  other:
    policy: round_robin
    replicas: [http://10.0.0.1:8100]
timeouts: {connect_s: 1, read_s: 30}
circuit_breaker: {failure_threshold: 2}
"""
    )
    config = load_config_file(yaml_file)
    tiny = config.models["tiny"]
    assert tiny.policy.name == "cache_aware" and tiny.policy.load_margin == 3.0
    assert [r.url for r in tiny.replicas] == ["http://127.0.0.1:8100", "http://127.0.0.1:8101"]
    assert [r.replica_id for r in tiny.replicas] == ["127.0.0.1:8100", "r1"]
    assert tiny.tokenizer == "/ckpt/tiny"
    assert config.models["other"].policy.name == "round_robin"
    assert config.timeouts.read_s == 30 and config.breaker.failure_threshold == 2

    json_file = tmp_path / "gw.json"
    json_file.write_text(json.dumps({"models": {"m": {"replicas": ["http://h:1"]}}}))
    assert load_config_file(json_file).models["m"].policy.name == "cache_aware"


@pytest.mark.parametrize(
    "data, message",
    [
        ({}, "'models' is required"),
        ({"models": {"m": {"policy": "fastest", "replicas": []}}}, "unknown policy 'fastest'"),
        ({"models": {"m": {"replicas": ["ftp://x"]}}}, "must start with http"),
        ({"models": {"m": {"replicas": ["http://a:1", {"url": "http://b:1", "id": "a:1"}]}}}, "unique"),
        ({"models": {"m": {"replicas": []}}, "timeouts": {"read_s": -1}}, "read_s must be > 0"),
        ({"models": {"m": {"replicas": []}}, "timeouts": {"read_s": "soon"}}, "timeouts"),
        ({"models": {"m": {"replicas": []}}, "typo": 1}, "unknown top-level keys"),
        (
            {"models": {"m": {"policy": {"name": "cache_aware", "load_margin": "x"}}}},
            "load_margin must be a number",
        ),
        ({"models": {"m": {"replicas": []}}, "retries": -1}, "retries"),
        (
            {"models": {"m": {"replicas": []}}, "circuit_breaker": {"min_eject_s": -1}},
            r"circuit_breaker.min_eject_s must be >= 0, got -1",
        ),
        (
            {"models": {"m": {"policy": {"name": "cache_aware", "kv_usage_weight": -0.5}}}},
            r"policy.kv_usage_weight must be >= 0, got -0.5",
        ),
    ],
)
def test_bad_config_gives_a_clear_error(data, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(data)


def test_unreadable_or_malformed_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config_file(bad)


def test_tier_weights_override_the_defaults_tier_by_tier():
    policy = (
        parse_config(
            {
                "models": {
                    "m": {"policy": {"name": "cache_aware", "tier_weights": {"host": 0.9, "disk": "0.3"}}}
                }
            }
        )
        .models["m"]
        .policy
    )
    assert policy.weights() == {"device": 1.0, "host": 0.9, "disk": 0.3, "shared": 0.5}
    assert parse_config({"models": {"m": {}}}).models["m"].policy.weights()["host"] == 0.8


@pytest.mark.parametrize(
    "weights, message",
    [
        ({"nvme": 0.5}, r"policy.tier_weights: unknown tiers \['nvme'\]; known: device, host, disk, shared"),
        ({"host": 1.5}, r"policy.tier_weights.host must be in \[0, 1\], got 1.5"),
        ({"disk": -0.1}, r"policy.tier_weights.disk must be in \[0, 1\], got -0.1"),
        ({"disk": "fast"}, r"policy.tier_weights.disk must be a number"),
        ([0.5], r"policy.tier_weights must be a mapping of tier name -> weight"),
    ],
)
def test_bad_tier_weights_give_a_clear_error(weights, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({"models": {"m": {"policy": {"name": "cache_aware", "tier_weights": weights}}}})
