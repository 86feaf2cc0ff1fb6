"""The few Grafana HTTP API calls provisioning makes, over httpx with a service-account token.

Not grafana-client: its HTTP stack (niquests → urllib3-future) replaces ``urllib3`` in the whole
virtualenv, and Locust's requests-based users then stopped sending mid-run (issue 22).
"""

from __future__ import annotations

import httpx


class GrafanaError(Exception):
    """Grafana answered an error, or could not be reached (``status`` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class GrafanaUnauthorized(GrafanaError):
    """Grafana refused the token (401)."""


class GrafanaHTTP:
    def __init__(self, url: str, token: str, timeout: float = 10.0) -> None:
        self._client = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
        )
        self.url = url

    def close(self) -> None:
        self._client.close()

    def get(self, path: str) -> dict | None:
        """The JSON at ``path``, or None when Grafana has no such object (404)."""
        return self._call("GET", path, None, missing_ok=True)

    def post(self, path: str, body: dict) -> dict:
        return self._call("POST", path, body)

    def put(self, path: str, body: dict) -> dict:
        return self._call("PUT", path, body)

    def _call(self, method: str, path: str, body: dict | None, missing_ok: bool = False) -> dict | None:
        try:
            response = self._client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise GrafanaError(f"cannot reach Grafana at {self.url}: {exc}") from exc
        if response.status_code == 404 and missing_ok:
            return None
        if response.status_code == 401:
            raise GrafanaUnauthorized(f"Grafana at {self.url} refused the token (401)", 401)
        if response.status_code >= 400:
            try:
                detail = response.json().get("message", response.text)
            except ValueError:
                detail = response.text
            raise GrafanaError(
                f"{method} {path}: Grafana answered {response.status_code}: {detail[:300]}",
                response.status_code,
            )
        try:
            return response.json()
        except ValueError as exc:
            raise GrafanaError(f"{method} {path}: Grafana answered non-JSON: {response.text[:200]}") from exc
