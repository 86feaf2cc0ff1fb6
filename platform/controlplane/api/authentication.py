from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from controlplane.api.models import ApiToken
from controlplane.api.models.api_token import digest_of
from controlplane.api.throttling import TokenFailureThrottle


class BearerTokenAuthentication(TokenAuthentication):
    """An ApiToken read from ``Authorization: Bearer <token>`` (revoked ones are refused); an address
    that keeps sending unknown tokens gets 429s until its failures age out."""

    keyword = "Bearer"
    model = ApiToken

    def authenticate(self, request):
        throttle = TokenFailureThrottle()
        throttle.refuse_if_exceeded(request)
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle.record_failure()
            raise

    def authenticate_credentials(self, key):
        token = ApiToken.objects.active().select_related("user").filter(digest=digest_of(key)).first()
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        token.mark_used()
        return token.user, token
