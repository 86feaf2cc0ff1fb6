from gateway.circuit_breaker import CircuitBreaker
from gateway.config import BreakerConfig


def test_opens_after_threshold_and_success_resets_the_count():
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=3))
    assert breaker.record_failure() is False
    assert breaker.record_failure() is False
    breaker.record_success()
    assert breaker.record_failure() is False
    assert breaker.record_failure() is False
    assert breaker.record_failure() is True
    assert breaker.is_open and breaker.ejections == 1


def test_readmits_only_after_min_eject_time_and_enough_passing_checks():
    now = [0.0]
    breaker = CircuitBreaker(
        BreakerConfig(failure_threshold=1, recovery_checks=2, min_eject_s=5), clock=lambda: now[0]
    )
    assert breaker.record_failure() is True
    assert breaker.record_health(True) is False  # one passing check, too early anyway
    now[0] = 6.0
    assert breaker.record_health(False) is False  # a failed check restarts the count
    assert breaker.record_health(True) is False
    assert breaker.record_health(True) is True
    assert not breaker.is_open
    breaker.record_success()  # a request succeeding while closed is harmless
    assert breaker.consecutive_failures == 0
