from rest_framework.authentication import TokenAuthentication


class BearerTokenAuthentication(TokenAuthentication):
    """DRF token authentication read from ``Authorization: Bearer <token>``."""

    keyword = "Bearer"
