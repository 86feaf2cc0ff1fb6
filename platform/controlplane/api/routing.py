"""Every app's API routes are built the same way: plural kebab-case prefixes on a SimpleRouter."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter


def router_urls(viewsets: dict) -> list:
    """URL patterns for ``{"prefix": ViewSet, ...}``."""
    router = SimpleRouter()
    for prefix, viewset in viewsets.items():
        router.register(prefix, viewset)
    return router.urls
