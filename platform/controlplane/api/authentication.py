from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from controlplane.api.throttling import TokenFailureThrottle


class BearerTokenAuthentication(TokenAuthentication):
    """DRF token authentication read from ``Authorization: Bearer <token>``; an address that keeps
    sending unknown tokens gets 429s until its failures age out."""

    keyword = "Bearer"

    def authenticate(self, request):
        throttle = TokenFailureThrottle()
        throttle.refuse_if_exceeded(request)
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle.record_failure()
            raise
