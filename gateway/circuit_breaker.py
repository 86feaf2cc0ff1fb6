"""Eject a replica after consecutive failures; re-admit it once health checks pass again.

Failures come from two places: requests the proxy sent (connect error, 5xx before the first byte;
a client error, 4xx, is an answer and never a failure) and the active health checker. Both count
toward the same threshold; any success resets it. While open, only health checks can close the
breaker, and not before ``min_eject_s``: a replica that answers one probe between crashes should not
be flooded straight away.
"""

from __future__ import annotations

import time
from enum import StrEnum

from gateway.config import BreakerConfig


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"


class CircuitBreaker:
    def __init__(self, config: BreakerConfig, clock=time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self.state = BreakerState.CLOSED
        self.consecutive_failures = 0
        self._passing_checks = 0
        self._opened_at = 0.0
        self.ejections = 0

    @property
    def is_open(self) -> bool:
        return self.state is BreakerState.OPEN

    def record_failure(self) -> bool:
        """Count one failure; True when this failure ejected the replica."""
        self.consecutive_failures += 1
        self._passing_checks = 0
        if self.state is BreakerState.CLOSED and self.consecutive_failures >= self._config.failure_threshold:
            self.state = BreakerState.OPEN
            self._opened_at = self._clock()
            self.ejections += 1
            return True
        return False

    def record_success(self) -> None:
        """A request to the replica succeeded (only possible while closed)."""
        if self.state is BreakerState.CLOSED:
            self.consecutive_failures = 0

    def record_health(self, healthy: bool) -> bool:
        """Feed one active health check; True when it re-admitted the replica."""
        if not healthy:
            return self.record_failure() and False
        if self.state is BreakerState.CLOSED:
            self.consecutive_failures = 0
            return False
        self._passing_checks += 1
        if (
            self._passing_checks >= self._config.recovery_checks
            and self._clock() - self._opened_at >= self._config.min_eject_s
        ):
            self.state = BreakerState.CLOSED
            self.consecutive_failures = 0
            self._passing_checks = 0
            return True
        return False
