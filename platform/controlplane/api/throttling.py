"""API throttles. Rates are read from REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] on every request,
not once at import as DRF's own classes do, so a changed setting takes effect."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from rest_framework import exceptions, throttling
from rest_framework.settings import api_settings


class _RateFromSettings:
    scope: str

    def get_rate(self) -> str:
        try:
            return api_settings.DEFAULT_THROTTLE_RATES[self.scope]
        except KeyError as exc:
            raise ImproperlyConfigured(f"REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'] has no {self.scope!r} rate") from exc


class AnonThrottle(_RateFromSettings, throttling.AnonRateThrottle):
    pass


class UserThrottle(_RateFromSettings, throttling.UserRateThrottle):
    pass


class TokenFailureThrottle(_RateFromSettings, throttling.SimpleRateThrottle):
    """Failed token authentications per client address. DRF checks throttles only after
    authentication succeeds, so an unknown token would otherwise never be throttled."""

    scope = "token_failures"

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def refuse_if_exceeded(self, request) -> None:
        """429 once this address has used up its failures, before the token is even looked up."""
        self.key = self.get_cache_key(request, None)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        if len(self.history) >= self.num_requests:
            raise exceptions.Throttled(self.wait())

    def record_failure(self) -> None:
        self.throttle_success()  # appends now to the history refuse_if_exceeded loaded
