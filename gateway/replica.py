"""What the gateway knows about one replica right now: health, load, breaker."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gateway.circuit_breaker import CircuitBreaker
from gateway.config import BreakerConfig, ReplicaSpec


class Health(StrEnum):
    UNKNOWN = "unknown"  # not probed yet: routable, so a fresh gateway serves at once
    READY = "ready"
    NOT_READY = "not_ready"  # /health said 503: loading or draining
    DOWN = "down"  # unreachable


@dataclass
class ReplicaLoad:
    """Last values scraped from the replica's /metrics."""

    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0


@dataclass
class Replica:
    spec: ReplicaSpec
    breaker: CircuitBreaker
    health: Health = Health.UNKNOWN
    draining: bool = False
    in_flight: int = 0
    scraped: ReplicaLoad = field(default_factory=ReplicaLoad)
    # Requests the replica reported beyond our own in-flight ones at the last scrape: traffic from
    # other gateways or clients. Our own count is exact and current; a scraped one is up to a
    # health interval old, so it only adds what we cannot see ourselves.
    foreign_load: float = 0.0
    requests_served: int = 0

    @classmethod
    def create(cls, spec: ReplicaSpec, breaker: BreakerConfig) -> Replica:
        return cls(spec=spec, breaker=CircuitBreaker(breaker))

    @property
    def replica_id(self) -> str:
        return self.spec.replica_id

    @property
    def url(self) -> str:
        return self.spec.url

    @property
    def routable(self) -> bool:
        return (
            not self.draining and not self.breaker.is_open and self.health in (Health.READY, Health.UNKNOWN)
        )

    def load(self, kv_usage_weight: float = 1.0) -> float:
        return self.in_flight + self.foreign_load + kv_usage_weight * self.scraped.kv_usage

    def observe_scrape(self, load: ReplicaLoad) -> None:
        self.scraped = load
        self.foreign_load = max(0.0, load.running + load.waiting - self.in_flight)

    def describe(self) -> dict:
        return {
            "id": self.replica_id,
            "url": self.url,
            "health": str(self.health),
            "draining": self.draining,
            "breaker": str(self.breaker.state),
            "ejections": self.breaker.ejections,
            "routable": self.routable,
            "in_flight": self.in_flight,
            "requests_served": self.requests_served,
            "scraped": vars(self.scraped),
            "foreign_load": self.foreign_load,
        }
