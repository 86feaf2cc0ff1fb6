"""Gateway configuration: which models it serves, by which policy, on which replicas.

The same dataclasses are filled from a static file (``--config``) or from the control plane's REST
API; everything is validated here so that bad input becomes one clear ``ConfigError`` message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.kv_index import DEFAULT_TIER_WEIGHTS, TIERS

POLICIES = ("round_robin", "least_load", "cache_aware", "session")
# A replica's part in prefill/decode disaggregation (gateway/disaggregation.py): mixed replicas serve
# whole requests; a model with prefill and decode replicas sends each request to both in turn.
ROLES = ("mixed", "prefill", "decode")
DEFAULT_SESSION_HEADER = "x-session-id"


class ConfigError(ValueError):
    """Raised for any invalid gateway configuration, with a message naming the bad field."""


def _require_at_least(config, section: str, minimums: dict[str, float], strictly: bool = False) -> None:
    """ConfigError naming the first field of ``config`` below its minimum (or at it, ``strictly``)."""
    for name, low in minimums.items():
        value = getattr(config, name)
        if value < low or (strictly and value == low):
            raise ConfigError(f"{section}.{name} must be {'>' if strictly else '>='} {low}, got {value}")


@dataclass(frozen=True)
class ReplicaSpec:
    url: str
    replica_id: str
    role: str = "mixed"

    @staticmethod
    def from_url(url: str, replica_id: str | None = None, role: str | None = None) -> ReplicaSpec:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"replica url must start with http:// or https://, got {url!r}")
        role = role or "mixed"
        if role not in ROLES:
            raise ConfigError(f"replica role must be one of {', '.join(ROLES)}, got {role!r}")
        url = url.rstrip("/")
        replica_id = str(replica_id) if replica_id else url.split("://", 1)[1]
        return ReplicaSpec(url=url, replica_id=replica_id, role=role)


@dataclass(frozen=True)
class PolicyConfig:
    name: str = "cache_aware"
    # cache_aware: the longest-prefix replica loses to the least loaded one when its load is higher by
    # more than this many load units (one unit ~ one in-flight request).
    load_margin: float = 4.0
    # Weight of the replica's KV-cache usage (0..1) in its load score.
    kv_usage_weight: float = 1.0
    session_header: str = DEFAULT_SESSION_HEADER
    # cache_aware: what a prefix block held in each KV tier counts for ((tier, weight) pairs, each
    # weight in [0, 1]; a configured mapping overrides the defaults tier by tier).
    tier_weights: tuple[tuple[str, float], ...] = tuple(DEFAULT_TIER_WEIGHTS.items())

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise ConfigError(f"unknown policy {self.name!r}; choose one of {', '.join(POLICIES)}")
        _require_at_least(self, "policy", {"load_margin": 0, "kv_usage_weight": 0})
        for tier, weight in self.tier_weights:
            if tier not in TIERS:
                raise ConfigError(f"policy.tier_weights: unknown tier {tier!r}; known: {', '.join(TIERS)}")
            if not 0 <= weight <= 1:
                raise ConfigError(f"policy.tier_weights.{tier} must be in [0, 1], got {weight}")

    def weights(self) -> dict[str, float]:
        return {**DEFAULT_TIER_WEIGHTS, **dict(self.tier_weights)}


@dataclass(frozen=True)
class ModelRoute:
    name: str
    policy: PolicyConfig
    replicas: tuple[ReplicaSpec, ...]
    # Checkpoint directory whose tokenizer and chat template the replicas use (cache_aware needs it).
    tokenizer: str | None = None
    # Why a model the control plane knows has no replica to route to (its deployment's state); the
    # gateway answers 503 with it instead of 404.
    unavailable: str | None = None


@dataclass(frozen=True)
class Timeouts:
    connect_s: float = 2.0
    # Longest wait for the first byte and between two chunks of a response.
    read_s: float = 120.0
    write_s: float = 10.0

    def __post_init__(self) -> None:
        _require_at_least(
            self, "timeouts", dict.fromkeys(("connect_s", "read_s", "write_s"), 0), strictly=True
        )


@dataclass(frozen=True)
class BreakerConfig:
    # Consecutive failed requests (connect error, 5xx) or failed health checks that eject a replica.
    failure_threshold: int = 3
    # Consecutive passing health checks that re-admit an ejected replica.
    recovery_checks: int = 1
    # An ejected replica stays out at least this long, even if a health check passes sooner.
    min_eject_s: float = 1.0

    def __post_init__(self) -> None:
        _require_at_least(
            self, "circuit_breaker", {"failure_threshold": 1, "recovery_checks": 1, "min_eject_s": 0}
        )


@dataclass(frozen=True)
class GatewayConfig:
    models: dict[str, ModelRoute] = field(default_factory=dict)
    timeouts: Timeouts = field(default_factory=Timeouts)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    refresh_interval_s: float = 3.0
    health_interval_s: float = 1.0
    kv_poll_interval_s: float = 0.1
    # A routed request's prefix counts as cached on its replica while the request runs (however long
    # it queues there) and this long after it ends, until the replica's own KV events confirm it;
    # keeps a burst of same-prefix requests together.
    pending_prefix_ttl_s: float = 2.0
    retries: int = 1
    # Bearer key the replicas require (``chassis serve --api-key``): sent on KV polls and forwarded
    # requests in place of the client's own Authorization header.
    replica_api_key: str | None = None


def _as_float(value: Any, where: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where} must be a number, got {value!r}") from None


def _build(cls: type, data: Any, where: str) -> Any:
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping")
    known = set(cls.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(known)}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def parse_policy(data: Any, where: str) -> PolicyConfig:
    if isinstance(data, str):
        return PolicyConfig(name=data)
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a policy name or a mapping with 'name'")
    unknown = set(data) - set(PolicyConfig.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    kwargs = dict(data)
    for key in ("load_margin", "kv_usage_weight"):
        if key in kwargs:
            kwargs[key] = _as_float(kwargs[key], f"{where}.{key}")
    if "session_header" in kwargs:
        kwargs["session_header"] = str(kwargs["session_header"]).lower()
    if "tier_weights" in kwargs:
        kwargs["tier_weights"] = parse_tier_weights(kwargs["tier_weights"], f"{where}.tier_weights")
    return PolicyConfig(**kwargs)


def parse_tier_weights(data: Any, where: str) -> tuple[tuple[str, float], ...]:
    """A mapping of tier name -> weight, over the defaults."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping of tier name -> weight ({', '.join(TIERS)})")
    unknown = set(data) - set(TIERS)
    if unknown:
        raise ConfigError(f"{where}: unknown tiers {sorted(unknown)}; known: {', '.join(TIERS)}")
    weights = {**DEFAULT_TIER_WEIGHTS, **{tier: _as_float(w, f"{where}.{tier}") for tier, w in data.items()}}
    return tuple(weights.items())


def parse_replicas(items: Any, where: str) -> tuple[ReplicaSpec, ...]:
    if not isinstance(items, list):
        raise ConfigError(f"{where} must be a list of URLs or {{url, id}} mappings")
    specs = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            specs.append(ReplicaSpec.from_url(item))
        elif isinstance(item, dict) and "url" in item:
            unknown = set(item) - {"url", "id", "role"}
            if unknown:
                raise ConfigError(f"{where}[{i}]: unknown keys {sorted(unknown)}; allowed: id, role, url")
            try:
                specs.append(ReplicaSpec.from_url(item["url"], item.get("id"), item.get("role")))
            except ConfigError as exc:
                raise ConfigError(f"{where}[{i}]: {exc}") from None
        else:
            raise ConfigError(f"{where}[{i}] must be a URL or a mapping with 'url'")
    ids = [spec.replica_id for spec in specs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{where}: replica ids must be unique, got {ids}")
    return tuple(specs)


def parse_models(data: Any) -> dict[str, ModelRoute]:
    if not isinstance(data, dict) or not data:
        raise ConfigError("'models' must be a non-empty mapping of model name -> {policy, replicas}")
    models = {}
    for name, entry in data.items():
        where = f"models.{name}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a mapping")
        unknown = set(entry) - {"policy", "replicas", "tokenizer"}
        if unknown:
            raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
        tokenizer = entry.get("tokenizer")
        models[str(name)] = ModelRoute(
            name=str(name),
            policy=parse_policy(entry.get("policy", "cache_aware"), f"{where}.policy"),
            replicas=parse_replicas(entry.get("replicas", []), f"{where}.replicas"),
            tokenizer=str(tokenizer) if tokenizer else None,
        )
    return models


def parse_config(data: Any, *, require_models: bool = True) -> GatewayConfig:
    if not isinstance(data, dict):
        raise ConfigError("gateway config must be a mapping at the top level")
    allowed = {
        "models",
        "timeouts",
        "circuit_breaker",
        "refresh_interval_s",
        "health_interval_s",
        "kv_poll_interval_s",
        "pending_prefix_ttl_s",
        "retries",
        "replica_api_key",
    }
    unknown = set(data) - allowed
    if unknown:
        raise ConfigError(f"unknown top-level keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    models: dict[str, ModelRoute] = {}
    if require_models:
        if "models" not in data:
            raise ConfigError("'models' is required: a mapping of model name -> {policy, replicas}")
        models = parse_models(data["models"])
    intervals = {}
    for key in ("refresh_interval_s", "health_interval_s", "kv_poll_interval_s", "pending_prefix_ttl_s"):
        if key in data:
            intervals[key] = _as_float(data[key], key)
            if intervals[key] < 0 or (key != "pending_prefix_ttl_s" and intervals[key] == 0):
                raise ConfigError(f"{key} must be > 0")
    retries = data.get("retries", 1)
    if not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"retries must be an integer >= 0, got {retries!r}")
    return GatewayConfig(
        models=models,
        timeouts=_build(Timeouts, data.get("timeouts"), "timeouts"),
        breaker=_build(BreakerConfig, data.get("circuit_breaker"), "circuit_breaker"),
        retries=retries,
        replica_api_key=str(data["replica_api_key"]) if data.get("replica_api_key") else None,
        **intervals,
    )


def load_config_file(path: str | Path, *, require_models: bool = True) -> GatewayConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    else:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    return parse_config(data, require_models=require_models)
