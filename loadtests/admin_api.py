"""Locust: operators and dashboards reading the control plane's admin REST API with a token.

    CHASSIS_API_TOKEN=$(python manage.py create_api_token loadtest --role viewer) \
    locust -f loadtests/admin_api.py --host http://127.0.0.1:8000 --headless -u 10 -r 5 -t 2m
"""

from __future__ import annotations

import os
import random

from locust import HttpUser, between, task


class AdminApiUser(HttpUser):
    wait_time = between(0.2, 1.0)

    def on_start(self) -> None:
        token = os.environ.get("CHASSIS_API_TOKEN")
        if not token:
            raise RuntimeError("set CHASSIS_API_TOKEN (python manage.py create_api_token USER --role viewer)")
        self.client.headers["Authorization"] = f"Bearer {token}"

    def _get(self, path: str, name: str, **params) -> dict | None:
        with self.client.get(path, params=params or None, name=name, catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {response.text[:200]}")
                return None
            return response.json()

    @task(3)
    def deployments(self) -> None:
        page = self._get("/api/v1/deployments/", "/api/v1/deployments/")
        for deployment in (page or {}).get("results", [])[:1]:
            self._get(f"/api/v1/deployments/{deployment['id']}/", "/api/v1/deployments/[id]/")

    @task(3)
    def ready_replicas(self) -> None:
        page = self._get("/api/v1/replicas/", "/api/v1/replicas/?state=ready", state="ready")
        replicas = (page or {}).get("results", [])
        if replicas:
            self._get(f"/api/v1/replicas/{random.choice(replicas)['id']}/", "/api/v1/replicas/[id]/")

    @task(1)
    def nodes(self) -> None:
        self._get("/api/v1/nodes/", "/api/v1/nodes/")

    @task(1)
    def replica_events(self) -> None:
        self._get("/api/v1/replica-events/", "/api/v1/replica-events/", limit=20)
